#include "cli.hpp"

int main(int argc, char** argv) {
  return mha::cli::main({argv + 1, argv + argc});
}
