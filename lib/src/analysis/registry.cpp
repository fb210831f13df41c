// The registry of analyses (mha/analysis/analysis.hpp): registry.def's lines.
#include "mha/analysis/analysis.hpp"

namespace mha {

#define MHA_ANALYSIS(name) extern const Analysis name##_analysis;
#include "registry.def"
#undef MHA_ANALYSIS

const std::vector<const Analysis*>& analyses() {
#define MHA_ANALYSIS(name) &name##_analysis,
  static const std::vector<const Analysis*> all = {
#include "registry.def"
  };
#undef MHA_ANALYSIS
  return all;
}

const Analysis* find_analysis(const std::string& name) {
  for (const Analysis* a : analyses())
    if (name == a->name) return a;
  return nullptr;
}

}  // namespace mha
