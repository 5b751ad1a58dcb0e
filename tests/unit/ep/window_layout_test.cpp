// The op's window layout and the EP template agree on the regions and their
// order, and regions never overlap or lose their 16-byte row alignment.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "../../../runtime/ep/window_layout.h"

namespace epjit::ep {
namespace {

TEST(WindowLayout, RegionsMatchTheTemplateInOrder) {
  std::ifstream file(std::string(EPJIT_SOURCE_DIR) + "/templates/ep_dispatch_combine.mlir");
  ASSERT_TRUE(file) << "templates/ep_dispatch_combine.mlir not found";
  std::stringstream text;
  text << file.rdbuf();
  const std::string source = text.str();
  std::vector<std::string> declared;
  const std::regex region(R"(ep\.window_region @(\w+))");
  for (auto it = std::sregex_iterator(source.begin(), source.end(), region); it != std::sregex_iterator(); ++it)
    declared.push_back((*it)[1]);
  ASSERT_EQ(declared.size(), size_t(kRegionCount));
  for (int r = 0; r < kRegionCount; ++r) EXPECT_EQ(declared[size_t(r)], kRegionNames[size_t(r)]) << "region " << r;
}

TEST(WindowLayout, RegionsAreDisjointAlignedAndSizedForTheConfig) {
  EpDispatchCombineConfig config;
  config.rank = 0;
  config.world_size = 8;
  config.hidden_dim = 7168;
  config.max_num_inp_token_per_rank = 37;
  config.num_experts_per_rank = 32;
  config.num_experts_per_token = 8;
  config.combine_mode = CombineMode::Scatter;
  config.quant_type = QuantType::Fp8Blockwise;
  config.target = "host";
  const WindowLayout layout = WindowLayout::of(config);
  for (int r = 0; r < kRegionCount; ++r) {
    EXPECT_EQ(layout.offset[size_t(r)] % 256, 0u) << kRegionNames[size_t(r)];
    if (r + 1 < kRegionCount) EXPECT_LE(layout.offset[size_t(r)] + layout.bytes[size_t(r)], layout.offset[size_t(r) + 1]);
  }
  const size_t capacity = 8 * 37;
  EXPECT_EQ(layout.bytes[size_t(Region::RecvTokens)], capacity * 7168 * 2);
  EXPECT_EQ(layout.bytes[size_t(Region::ScatterRows)], 37u * 8 * 7168);          // fp8 codes
  EXPECT_EQ(layout.bytes[size_t(Region::ScatterScales)], 37u * 8 * 56 * 4);      // 56 blocks of 128
  EXPECT_EQ(layout.bytes[size_t(Region::CombineRows)], 0u);                      // gather only
  EXPECT_EQ(route_words(config), 37u * 8 + 1);
}

}  // namespace
}  // namespace epjit::ep
