// Modules bind by their interface record: kernels by name, arguments by
// parameter name and type, launches checked against the signature, so a
// wrong argument list is an epjit::Error naming the kernel and the parameter,
// never a fault. Records that are damaged or from another version are refused
// with the field that is wrong.
#include <gtest/gtest.h>

#include <string>

#include "../../common/work_dir.h"
#include "epjit/cache.h"
#include "epjit/device.h"
#include "epjit/error.h"
#include "epjit/kernel_module.h"
#include "epjit/window_layout.h"

namespace epjit {
namespace {

using testing::freshDir;

// The message of the epjit::Error `body` throws; fails the test when none is thrown.
template <typename Body>
std::string errorOf(Body body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no epjit::Error";
  return {};
}

KernelCache& cache() {
  static KernelCache shared([] {
    CacheOptions options;
    options.dir = freshDir("kernel-interface-cache");
    options.opt_level = 1;
    return options;
  }());
  return shared;
}

const KernelSpec kQuantize{"quantize_fp8_direct", {{"hidden", "64"}}, "host"};

constexpr const char* kRecord = R"({
  "format": 3, "template": "t", "specialization": {"hidden": 64},
  "target": {"name": "host", "vendor": "cpu", "arch": "native", "wave_size": 32},
  "kernels": [{"name": "k", "warps_per_block": 4, "params": [
      {"name": "rows", "type": "ptr<bf16>"}, {"name": "w", "type": "window"}, {"name": "n", "type": "index"},
      {"name": "code", "type": "i32"}, {"name": "big", "type": "i64"}, {"name": "scale", "type": "f32"}]}],
  "window_regions": [{"name": "state", "element": "i32", "count": 16}, {"name": "rows", "element": "bf16", "count": 7}],
  "constants": {"state_error": 3}
})";

TEST(ModuleInterface, ParsesWhatTheCompilerWrites) {
  const std::shared_ptr<const KernelArtifact> artifact = cache().get(kQuantize);
  ASSERT_TRUE(artifact->interface);
  const ModuleInterface& record = *artifact->interface;
  EXPECT_EQ(record.template_name, "quantize_fp8_direct");
  EXPECT_EQ(record.target.name, "host");
  EXPECT_EQ(record.target.wave_size, 32);
  EXPECT_FALSE(record.target.dependent_launch);  // the host runs launches in order
  const KernelSignature& kernel = record.kernel("quantize_fp8_direct");
  EXPECT_EQ(kernel.describe(), "quantize_fp8_direct(input: ptr<bf16>, output: ptr<i8>, tokens: index)");
  EXPECT_EQ(kernel.warps_per_block, 4);
  // Rows of 64 elements: both are read and written in 16-byte chunks.
  EXPECT_EQ(kernel.find("input")->alignment, 16u);
  EXPECT_EQ(kernel.find("output")->alignment, 16u);
  EXPECT_EQ(kernel.find("tokens")->alignment, 0u);
  EXPECT_TRUE(record.window_regions.empty());
  // The manifest carries the same record.
  EXPECT_NE(artifact->manifest.find("\"interface\""), std::string::npos);
}

TEST(ModuleInterface, LookupsNameWhatExists) {
  const ModuleInterface record = ModuleInterface::parse(kRecord, "a test");
  EXPECT_EQ(record.constant("state_error"), 3);
  EXPECT_EQ(record.region("rows").bytes(), 14u);
  EXPECT_EQ(record.region_index("rows"), 1u);
  EXPECT_NE(errorOf([&] { record.kernel("other"); }).find("one of its kernels: k"), std::string::npos);
  EXPECT_NE(errorOf([&] { record.constant("state_epoch"); }).find("state_error"), std::string::npos);
  EXPECT_NE(errorOf([&] { record.region("signals"); }).find("state, rows"), std::string::npos);
}

// A buffer's parts lie in order, each at the next multiple of its "align"
// (schema::place_part), and the buffer ends with its last part; a record
// with a bad alignment or a part named twice is refused.
TEST(ModuleInterface, BufferPartsArePlacedInOrderAtTheirAlignment) {
  const std::string head =
      R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [{"name": "k", "warps_per_block": 1, "when": "@std", "params": []}], "window_regions": [],
          "constants": {}, "buffers": [{"name": "route", "parts": [
            {"name": "entries", "element": "i32", "count": 3, "align": 4, "meaning": "per entry"},)";
  const std::string tail = R"(]}]})";
  const ModuleInterface record =
      ModuleInterface::parse(head + R"({"name": "wide", "element": "i64", "count": 1, "align": 16})" + tail, "a test");
  EXPECT_TRUE(record.bound());
  EXPECT_EQ(record.kernel("k").when, "@std");
  const BufferInfo& route = record.buffer("route");
  EXPECT_EQ(route.bytes, 24u);
  EXPECT_EQ(route.part("entries").meaning, "per entry");
  EXPECT_EQ(route.part("wide").offset, 16u);
  EXPECT_EQ(route.part("wide").element_offset(), 2u);
  EXPECT_EQ(route.part("wide").bytes(), 8u);
  EXPECT_NE(errorOf([&] { route.part("sent"); }).find("one of its parts: entries, wide"), std::string::npos);
  EXPECT_NE(errorOf([&] { record.buffer("kept"); }).find("one of its buffers: route"), std::string::npos);
  for (const char* bad : {R"({"name": "wide", "element": "i64", "count": 1, "align": 4})",     // below its element
                          R"({"name": "wide", "element": "i64", "count": 1, "align": 24})",    // not a power of two
                          R"({"name": "wide", "element": "i64", "count": 1})",                 // no align
                          R"({"name": "entries", "element": "i32", "count": 1, "align": 4})"})  // a name twice
    EXPECT_NE(errorOf([&] { ModuleInterface::parse(head + bad + tail, "a test"); }).find("record.buffers[0]"),
              std::string::npos)
        << bad;
}

// Counts linear in runtime parameters: the record states each at zero and
// its coefficients; bind() completes them for given values and places the
// parts after them, and refuses a missing or unknown value.
TEST(ModuleInterface, BindCompletesRuntimeCountsAndPlacesThePartsAfterThem) {
  const std::string text =
      R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "runtime_params": ["max_tokens", "capacity"],
          "kernels": [], "constants": {},
          "window_regions": [{"name": "state", "element": "i32", "count": 16},
                             {"name": "inbox", "element": "bf16", "count": 2, "count_per": {"capacity": 7}}],
          "buffers": [{"name": "route", "parts": [
            {"name": "entries", "element": "i32", "count": 0, "count_per": {"max_tokens": 3}, "align": 4},
            {"name": "received", "element": "i32", "count": 1, "align": 4},
            {"name": "lines", "element": "i32", "count": 0, "count_per": {"max_tokens": 1, "capacity": 2}, "align": 16}]}]})";
  const ModuleInterface record = ModuleInterface::parse(text, "a test");
  EXPECT_FALSE(record.bound());
  EXPECT_NE(errorOf([&] { WindowLayout::of(record); }).find("before its runtime parameters are bound"),
            std::string::npos);
  const ModuleInterface bound = record.bind({{"max_tokens", 5}, {"capacity", 11}});
  EXPECT_TRUE(bound.bound());
  EXPECT_EQ(bound.runtime_values, (std::vector<uint64_t>{5, 11}));
  EXPECT_EQ(bound.region("inbox").count, 2u + 7u * 11u);
  const BufferInfo& route = bound.buffer("route");
  EXPECT_EQ(route.part("entries").count, 15u);
  EXPECT_EQ(route.part("received").offset, 60u);
  EXPECT_EQ(route.part("lines").offset, 64u);  // 64 is the next 16-byte line after 64
  EXPECT_EQ(route.part("lines").count, 5u + 22u);
  EXPECT_EQ(route.bytes, 64u + 4u * 27u);
  const WindowLayout layout = WindowLayout::of(bound);
  const Window table = layout.table({});
  EXPECT_EQ(table.runtime_param[0], 5u);
  EXPECT_EQ(table.runtime_param[1], 11u);
  // Another op's values from the same record: the module serves both.
  EXPECT_EQ(record.bind({{"max_tokens", 1}, {"capacity", 2}}).buffer("route").part("received").offset, 12u);
  EXPECT_NE(errorOf([&] { record.bind({{"max_tokens", 5}}); }).find("'capacity', and no value was given"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { record.bind({{"max_tokens", 5}, {"capacity", 1}, {"hidden", 3}}); })
                .find("not a runtime parameter"),
            std::string::npos);
  std::string unknown = text;
  unknown.replace(unknown.find(R"({"capacity": 7})"), 15, R"({"rows": 7})");
  EXPECT_NE(errorOf([&] { ModuleInterface::parse(unknown, "a test"); }).find("names no runtime parameter"),
            std::string::npos);
}

// Records of compilers that did not insert the entry wait say nothing, and
// such kernels must never be launched before their predecessor ends.
TEST(ModuleInterface, DependentLaunchIsOnlyWhatTheRecordStates) {
  EXPECT_FALSE(ModuleInterface::parse(kRecord, "a test").target.dependent_launch);
  std::string stated = kRecord;
  stated.replace(stated.find("\"wave_size\": 32"), 15, "\"wave_size\": 32, \"dependent_launch\": true");
  EXPECT_TRUE(ModuleInterface::parse(stated, "a test").target.dependent_launch);
  std::string wrong = kRecord;
  wrong.replace(wrong.find("\"wave_size\": 32"), 15, "\"wave_size\": 32, \"dependent_launch\": 1");
  EXPECT_NE(errorOf([&] { ModuleInterface::parse(wrong, "a test"); })
                .find("record.target.dependent_launch is not true or false"),
            std::string::npos);
}

// A pointer's "align" is what the record states; a record without it (a
// compile stopped before the warp ops were lowered) keeps the DSL's
// contract, 16 bytes.
TEST(ModuleInterface, PointerAlignmentIsWhatTheRecordStates) {
  const std::string head =
      R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [{"name": "k", "warps_per_block": 1, "params": [)";
  const std::string tail = R"(]}], "window_regions": [], "constants": {}})";
  auto parse = [&](const std::string& params) { return ModuleInterface::parse(head + params + tail, "a test"); };
  EXPECT_EQ(parse(R"({"name": "a", "type": "ptr<i32>", "align": 4})").kernel("k").find("a")->alignment, 4u);
  EXPECT_EQ(parse(R"({"name": "a", "type": "ptr<bf16>"})").kernel("k").find("a")->alignment, 16u);
  EXPECT_EQ(parse(R"({"name": "a", "type": "index"})").kernel("k").find("a")->alignment, 0u);
  EXPECT_NE(errorOf([&] { parse(R"({"name": "a", "type": "ptr<i32>", "align": 12})"); })
                .find("record.kernels[0].params[0].align = 12 is not a power of two"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { parse(R"({"name": "a", "type": "ptr<i32>", "align": 2})"); })
                .find("record.kernels[0].params[0].align = 2 is outside [4, 4096]"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { parse(R"({"name": "a", "type": "ptr<i32>", "align": "16"})"); })
                .find("record.kernels[0].params[0].align is not an integer"),
            std::string::npos);
}

TEST(ModuleInterface, DamagedOrForeignRecordsAreRefusedNamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "is not JSON"},
      {R"({"format": 1})", "record.format = 1 is not this epjit's format 3"},
      {R"({"template": "t"})", "record.format is missing"},
      {R"({"format": "1"})", "record.format is not an integer"},
      {R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 0}})",
       "record.target.wave_size = 0 is outside [1, 1024]"},
      {R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [{"name": "k", "warps_per_block": 1, "params": [{"name": "a", "type": "tensor"}]}]})",
       "record.kernels[0].params[0].type = 'tensor' is not ptr<T>, window, index, i32, i64 or f32"},
      {R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [{"name": "k", "warps_per_block": 1, "params": [{"name": "a", "type": "ptr<f64>"}]}]})",
       "points to an unknown element type"},
      {R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [{"name": "k", "warps_per_block": 1, "params": [{"name": "a", "type": "index"},
                                                                     {"name": "a", "type": "index"}]}]})",
       "names parameter 'a' twice"},
      {R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [], "window_regions": [{"name": "r", "element": "i32", "count": -1}]})",
       "record.window_regions[0].count = -1 is outside"},
      {R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [], "window_regions": [], "constants": {"state_error": "3"}})",
       "record.constants.state_error is not an integer"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = errorOf([&] { ModuleInterface::parse(text, "a test"); });
    EXPECT_NE(message.find("the interface record of a test is invalid"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << "for " << text << "\n" << message;
  }
}

TEST(LaunchArgs, SetsByNameInTheSignaturesOrderAndRefusesWhatDoesNotFit) {
  const ModuleInterface record = ModuleInterface::parse(kRecord, "a test");
  Kernel kernel;
  kernel.name = "k";
  kernel.signature = &record.kernel("k");
  alignas(16) int rows = 0;  // the record states no "align": 16 bytes
  Window window{};
  window.peer_base[1] = reinterpret_cast<char*>(&rows);
  window.region_offset[2] = 4096;
  const KernelArgs args = LaunchArgs(kernel)
                              .set("scale", 0.5f)
                              .set("n", size_t(37))
                              .set("w", window)
                              .set("code", -7)
                              .set("rows", &rows)
                              .set("big", int64_t(1) << 40)
                              .build();
  ASSERT_EQ(args.size(), 6u);
  EXPECT_EQ(*static_cast<int**>(args.pointers()[0]), &rows);
  EXPECT_EQ(*static_cast<uint64_t*>(args.pointers()[2]), 37u);
  // The window table travels by value, as the kernels take it.
  const auto* passed = static_cast<const Window*>(args.pointers()[1]);
  EXPECT_EQ(args.slot(1).bytes, sizeof(Window));
  EXPECT_EQ(passed->peer_base[1], reinterpret_cast<char*>(&rows));
  EXPECT_EQ(passed->region_offset[2], 4096u);
  EXPECT_EQ(*static_cast<int32_t*>(args.pointers()[3]), -7);
  EXPECT_EQ(args.slot(3).bytes, 4u);
  EXPECT_EQ(*static_cast<int64_t*>(args.pointers()[4]), int64_t(1) << 40);
  EXPECT_EQ(*static_cast<float*>(args.pointers()[5]), 0.5f);

  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("tokens", 1); }).find("kernel k has no parameter 'tokens'"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("n", &rows); }).find("parameter 'n' is given a pointer"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("rows", 5); }).find("parameter 'rows' is given the integer 5"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("w", &rows); }).find("parameter 'w' is given a pointer"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("rows", window); }).find("parameter 'rows' is given a window table"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("n", -1); }).find("parameter 'n' is given the integer -1"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("code", int64_t(1) << 33); }).find("'code'"), std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("scale", 1); }).find("'scale'"), std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("n", 1).set("n", 2); }).find("set twice"), std::string::npos);
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("n", 1).build(); }).find("left unset: rows, w, code, big, scale"),
            std::string::npos);
  Kernel bare;
  bare.name = "bare";
  EXPECT_NE(errorOf([&] { LaunchArgs{bare}; }).find("has no signature"), std::string::npos);
}

// A 16-byte access at an address that is not a multiple of 16 faults the
// device (and a 4-byte one off its element does too), so such a pointer is
// refused when it is set, naming the kernel, the parameter, the address and
// what it needs; null stays allowed (an absent optional buffer).
TEST(LaunchArgs, RefusesAPointerOffTheAlignmentItsParameterNeeds) {
  const ModuleInterface record = ModuleInterface::parse(
      R"({"format": 3, "template": "t", "target": {"name": "x", "vendor": "amd", "arch": "x", "wave_size": 64},
          "kernels": [{"name": "k", "warps_per_block": 1, "params": [
              {"name": "rows", "type": "ptr<bf16>", "align": 16}, {"name": "words", "type": "ptr<i32>", "align": 4},
              {"name": "bytes", "type": "ptr<i8>", "align": 1}]}],
          "window_regions": [], "constants": {}})",
      "a test");
  Kernel kernel;
  kernel.name = "k";
  kernel.signature = &record.kernel("k");
  alignas(16) char buffer[64] = {};
  EXPECT_NO_THROW(LaunchArgs(kernel).set("rows", buffer + 32).set("words", buffer + 4).set("bytes", buffer + 3).build());
  EXPECT_NO_THROW(LaunchArgs(kernel).set("rows", nullptr));
  const std::string rows = errorOf([&] { LaunchArgs(kernel).set("rows", buffer + 2); });
  EXPECT_NE(rows.find("kernel k: parameter 'rows' is at 0x"), std::string::npos) << rows;
  EXPECT_NE(rows.find("which is not a multiple of 16 bytes (2 past one)"), std::string::npos) << rows;
  EXPECT_NE(rows.find("k accesses 'rows' with 16-byte vector loads and stores"), std::string::npos) << rows;
  EXPECT_NE(rows.find("a fresh allocation, or a copy of the view"), std::string::npos) << rows;
  EXPECT_NE(errorOf([&] { LaunchArgs(kernel).set("rows", buffer + 8); }).find("(8 past one)"), std::string::npos);
  const std::string words = errorOf([&] { LaunchArgs(kernel).set("words", buffer + 6); });
  EXPECT_NE(words.find("not a multiple of 4 bytes (2 past one)"), std::string::npos) << words;
  EXPECT_NE(words.find("one 4-byte element at a time"), std::string::npos) << words;
  // The op's early checks use the same rule under the caller's names.
  EXPECT_FALSE(pointer_aligned_for(kernel, "rows", buffer + 4));
  EXPECT_TRUE(pointer_aligned_for(kernel, "rows", buffer + 16));
  EXPECT_TRUE(pointer_aligned_for(kernel, "absent", buffer + 1));
  EXPECT_NE(errorOf([&] { require_pointer_alignment(kernel, "rows", buffer + 1, "dispatch", "input"); })
                .find("dispatch: input is at 0x"),
            std::string::npos);
}

TEST(KernelModule, BindsByNameAndEveryLaunchIsCheckedAgainstTheSignature) {
  auto device = make_host_device();
  auto stream = device->create_stream();
  const KernelModule module(*device, cache().get(kQuantize));
  const Kernel& kernel = module.kernel("quantize_fp8_direct");
  EXPECT_EQ(kernel.wave_size, 32);
  EXPECT_NE(errorOf([&] { module.kernel("dequantize"); }).find("has no kernel 'dequantize'"), std::string::npos);

  std::vector<uint16_t> x(64 * 3, 0x3F80);  // 1.0
  std::vector<uint8_t> q(64 * 3 + 1, 0xAB);
  // Positional arguments that disagree with the signature: a count, a type, the launch bound.
  KernelArgs missing;
  missing.add(x.data()).add(q.data());
  EXPECT_NE(errorOf([&] { device->launch(kernel, {1, 4}, missing, *stream); })
                .find("launch of quantize_fp8_direct with 2 arguments (expected 3 arguments: "
                      "quantize_fp8_direct(input: ptr<bf16>, output: ptr<i8>, tokens: index))"),
            std::string::npos);
  KernelArgs wrong;
  wrong.add(x.data()).add(q.data()).add(3.0f);
  EXPECT_NE(errorOf([&] { device->launch(kernel, {1, 4}, wrong, *stream); })
                .find("argument 2 ('tokens') is a float of 4 bytes"),
            std::string::npos);
  KernelArgs narrow;
  narrow.add(x.data()).add(q.data()).add(int32_t(3));
  EXPECT_NE(errorOf([&] { device->launch(kernel, {1, 4}, narrow, *stream); }).find("'tokens' of type index"),
            std::string::npos);
  const KernelArgs args = LaunchArgs(kernel).set("input", x.data()).set("output", q.data()).set("tokens", 3).build();
  EXPECT_NE(errorOf([&] { device->launch(kernel, {1, 8}, args, *stream); })
                .find("with 8 warps per block, beyond the 4 it was compiled for"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { device->launch(kernel, {0, 4}, args, *stream); }).find("with an empty grid"),
            std::string::npos);

  device->launch(kernel, {2, 4}, args, *stream);
  stream->synchronize();
  for (size_t i = 0; i < 64 * 3; ++i) ASSERT_EQ(q[i], 0x38) << i;  // 1.0 in E4M3FN
  EXPECT_EQ(q.back(), 0xAB) << "the launch wrote past its rows";
}

TEST(KernelModule, AModuleForAnotherKindOfDeviceIsRefused) {
  // A record claiming an AMD target cannot be bound on the host device.
  auto artifact = std::make_shared<KernelArtifact>(*cache().get(kQuantize));
  ModuleInterface foreign = *artifact->interface;
  foreign.target = {"gfx942", "amd", "gfx942", 64};
  artifact->interface = std::make_shared<const ModuleInterface>(foreign);
  auto device = make_host_device();
  EXPECT_NE(errorOf([&] { KernelModule(*device, artifact); }).find("which the host device does not run"),
            std::string::npos);
}

TEST(Devices, KindsAreChosenByNameAndUnknownOnesAreRefused) {
  EXPECT_EQ(make_device("host")->vendor(), Vendor::Cpu);
  EXPECT_TRUE(make_device("host")->host_addressable());
  EXPECT_EQ(make_device("host")->sharing(), SharingMethod::FileDescriptor);
  EXPECT_NE(errorOf([] { make_device("rocm"); }).find("host, cuda or hip"), std::string::npos);
}

}  // namespace
}  // namespace epjit
