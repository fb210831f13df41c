// tensor.hpp: shape and C-order indexing, copies that own their elements,
// moves that leave an empty tensor, resize and fill.
#include <catch2/catch.hpp>
#include <cstddef>
#include <utility>
#include <vector>

#include "mha/base/tensor.hpp"

TEST_CASE("Tensor is a C-order array that owns its elements", "[tensor]") {
  mha::Tensor<float, 3> t({2, 3, 4});
  CHECK(t.shape() == mha::TensorShape<3>{2, 3, 4});
  CHECK(t.shape()[1] == 3);
  CHECK(t.size() == 24);
  CHECK(std::vector<std::size_t>(t.shape().begin(), t.shape().end()) ==
        std::vector<std::size_t>{2, 3, 4});
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i);
  CHECK(t(1, 2, 3) == 23);
  CHECK(t(1, 0, 1) == 13);
  CHECK(t.end() - t.begin() == 24);

  mha::Tensor<float, 3> copy = t;
  REQUIRE(copy.data() != t.data());
  copy(0, 0, 0) = -1;
  CHECK(t(0, 0, 0) == 0);
  CHECK(copy(1, 2, 3) == 23);

  mha::Tensor<float, 3> moved = std::move(copy);
  CHECK(moved(0, 0, 0) == -1);
  CHECK(copy.size() == 0);  // a moved-from tensor is empty
  CHECK(copy.data() == nullptr);
  CHECK(copy.shape() == mha::TensorShape<3>{});

  copy = moved;  // assignable again
  CHECK(copy(0, 0, 0) == -1);
}

TEST_CASE("Tensor defaults, resize and full", "[tensor]") {
  mha::Tensor<double, 2> empty;
  CHECK(empty.size() == 0);
  CHECK(empty.data() == nullptr);
  CHECK(empty.shape() == mha::TensorShape<2>{0, 0});

  auto ones = mha::Tensor<double, 1>::full({5}, 1.0);
  CHECK(std::vector<double>(ones.begin(), ones.end()) == std::vector<double>(5, 1.0));
  const double* before = ones.data();
  ones.resize({5});  // same number of elements: kept in place
  CHECK(ones.data() == before);
  CHECK(ones(4) == 1.0);

  mha::Tensor<double, 2> m = mha::Tensor<double, 2>::from_shape({2, 2});
  m.resize({3, 2});
  CHECK(m.size() == 6);
  m.fill(2);
  CHECK(m(2, 1) == 2);
  m.resize({0, 2});
  CHECK(m.size() == 0);
  CHECK(m.data() == nullptr);
}
