// Every quantize/dequantize template, compiled by epjit-compile for the host
// targets (each carrying a GPU's numerics and wave width), loaded and run by
// warp threads, must match numerics.h bit for bit: random inputs with fixed
// seeds, hidden sizes that are and are not multiples of the chunk and wave,
// tokens 1, 3 and 37, outputs poisoned before each run with guard elements
// after them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "epjit/numerics.h"
#include "host_launcher.h"

namespace epjit {
namespace {

struct HostTarget {
  const char* name;
  Fp8Format fp8;
  bool fp4;
};

constexpr HostTarget kHostTargets[] = {
    {"host", Fp8Format::E4M3FN, true},
    {"host-gfx942", Fp8Format::E4M3FNUZ, false},
    {"host-gfx950", Fp8Format::E4M3FN, true},
    {"host-gfx1250", Fp8Format::E4M3FN, true},
};

enum class Kind { QuantizeDirect, QuantizeBlockwise, QuantizeMx, DequantizeDirect, DequantizeBlockwise, DequantizeMx };

struct TemplateCase {
  const char* name;
  Kind kind;
  bool fp4;
  std::vector<int> hiddens;  // one chunk-aligned, one not
};

const TemplateCase kTemplates[] = {
    {"quantize_fp8_direct", Kind::QuantizeDirect, false, {7168, 37}},
    {"quantize_fp8_blockwise", Kind::QuantizeBlockwise, false, {1024, 333}},
    {"quantize_mxfp4", Kind::QuantizeMx, true, {7168, 86}},
    {"dequantize_fp8_direct", Kind::DequantizeDirect, false, {7168, 37}},
    {"dequantize_fp8_blockwise", Kind::DequantizeBlockwise, false, {1024, 333}},
    {"dequantize_mxfp4", Kind::DequantizeMx, true, {7168, 86}},
};

constexpr int kTokenCounts[] = {1, 3, 37};
constexpr int kGuard = 64;  // poisoned elements after every output
constexpr uint8_t kPoisonByte = 0xAB;
constexpr uint16_t kPoisonBf16 = 0xFFFE;

struct Case {
  const TemplateCase* tpl;
  const HostTarget* target;
  int hidden;
};

std::string caseName(const Case& c) {
  std::string target = c.target->name;
  for (char& ch : target) ch = ch == '-' ? '_' : ch;
  return std::string(c.tpl->name) + "_" + target + "_h" + std::to_string(c.hidden);
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (const TemplateCase& tpl : kTemplates)
    for (const HostTarget& target : kHostTargets)
      if (!tpl.fp4 || target.fp4)
        for (int hidden : tpl.hiddens) cases.push_back({&tpl, &target, hidden});
  return cases;
}

// Builds the kernel library with epjit-compile once per case.
std::string buildKernel(const Case& c) {
  const std::filesystem::path dir = std::filesystem::path(EPJIT_TEST_WORK_DIR) / caseName(c);
  std::filesystem::create_directories(dir);
  const std::string library = (dir / "kernel.so").string();
  std::ostringstream command;
  command << EPJIT_COMPILE_TOOL << " --template " << c.tpl->name << " --set hidden=" << c.hidden << " --target "
          << c.target->name << " --emit bin -o " << library << " --dump-stages " << (dir / "stages").string()
          << " 2> " << (dir / "compile.log").string();
  if (std::system(command.str().c_str()) != 0) {
    std::ifstream log(dir / "compile.log");
    std::stringstream text;
    text << log.rdbuf();
    throw std::runtime_error("epjit-compile failed: " + command.str() + "\n" + text.str());
  }
  return library;
}

// Random bf16 rows at many magnitudes, with zeros, saturating values, tiny
// values and (row 2) a NaN and an Inf.
std::vector<uint16_t> randomRows(int tokens, int hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 12);
  std::vector<uint16_t> rows(size_t(tokens) * hidden + kGuard, kPoisonBf16);
  for (int t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < hidden; ++i) {
      float x = normal(rng) * scale;
      if (i % 97 == 5) x = 0.0f;
      if (i % 89 == 7) x = 1000.0f * (i % 2 ? -1.0f : 1.0f);
      if (i % 83 == 11) x = std::ldexp(1.0f, -140);
      rows[size_t(t) * hidden + i] = encode_bf16(x);
    }
    if (t == 2 && hidden > 20) {
      rows[size_t(t) * hidden + 3] = encode_bf16(std::numeric_limits<float>::quiet_NaN());
      rows[size_t(t) * hidden + hidden - 2] = encode_bf16(std::numeric_limits<float>::infinity());
    }
  }
  return rows;
}

std::vector<uint8_t> randomBytes(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(count + kGuard, kPoisonByte);
  for (size_t i = 0; i < count; ++i) bytes[i] = uint8_t(rng());
  return bytes;
}

bool sameBf16(uint16_t a, uint16_t b) {
  const bool nanA = (a & 0x7FFF) > 0x7F80, nanB = (b & 0x7FFF) > 0x7F80;
  return a == b || (nanA && nanB);
}

template <typename T>
void expectGuardsIntact(const std::vector<T>& data, size_t used, T poison, const std::string& what) {
  for (size_t i = used; i < data.size(); ++i) ASSERT_EQ(data[i], poison) << what << ": written past its end at " << i;
}

void PrintTo(const Case& c, std::ostream* os) { *os << caseName(c); }

class HostTemplate : public ::testing::TestWithParam<Case> {};

TEST_P(HostTemplate, MatchesNumericsBitExactly) {
  const Case c = GetParam();
  const int hidden = c.hidden;
  const Fp8Format fp8 = c.target->fp8;
  const std::string library = buildKernel(c);
  testing::HostKernelLibrary kernels(library);
  const testing::HostEntry entry = kernels.entry(c.tpl->name);
  const int blocks128 = (hidden + 127) / 128, blocks32 = (hidden + 31) / 32;

  for (int tokens : kTokenCounts) {
    SCOPED_TRACE("tokens " + std::to_string(tokens));
    const size_t n = size_t(tokens) * hidden;
    size_t tokenArg = size_t(tokens);
    const uint32_t seed = uint32_t(hidden * 131 + tokens);
    switch (c.tpl->kind) {
      case Kind::QuantizeDirect: {
        std::vector<uint16_t> in = randomRows(tokens, hidden, seed);
        std::vector<uint8_t> out(n + kGuard, kPoisonByte);
        void* inPtr = in.data();
        void* outPtr = out.data();
        testing::launch(entry, 2, 4, {&inPtr, &outPtr, &tokenArg});
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(out[i], encode_fp8(decode_bf16(in[i]), fp8, Overflow::Saturate)) << "element " << i;
        expectGuardsIntact(out, n, kPoisonByte, "codes");
        break;
      }
      case Kind::QuantizeBlockwise: {
        std::vector<uint16_t> in = randomRows(tokens, hidden, seed);
        std::vector<uint8_t> out(n + kGuard, kPoisonByte);
        std::vector<float> scales(size_t(tokens) * blocks128 + kGuard, -7.0f);
        void *inPtr = in.data(), *outPtr = out.data(), *scalePtr = scales.data();
        testing::launch(entry, 2, 4, {&inPtr, &outPtr, &scalePtr, &tokenArg});
        for (int t = 0; t < tokens; ++t) {
          for (int b = 0; b < blocks128; ++b) {
            const int start = b * 128, count = std::min(128, hidden - start);
            float x[128];
            uint8_t expected[128];
            for (int i = 0; i < count; ++i) x[i] = decode_bf16(in[size_t(t) * hidden + start + i]);
            const float scale = quantize_fp8_block(x, count, fp8, expected);
            ASSERT_EQ(numerics_detail::bits_of(scales[size_t(t) * blocks128 + b]), numerics_detail::bits_of(scale))
                << "token " << t << " block " << b;
            for (int i = 0; i < count; ++i)
              ASSERT_EQ(out[size_t(t) * hidden + start + i], expected[i]) << "token " << t << " element " << start + i;
          }
        }
        expectGuardsIntact(out, n, kPoisonByte, "codes");
        expectGuardsIntact(scales, size_t(tokens) * blocks128, -7.0f, "scales");
        break;
      }
      case Kind::QuantizeMx: {
        std::vector<uint16_t> in = randomRows(tokens, hidden, seed);
        std::vector<uint8_t> out(n / 2 + kGuard, kPoisonByte);
        std::vector<uint8_t> scales(size_t(tokens) * blocks32 + kGuard, kPoisonByte);
        void *inPtr = in.data(), *outPtr = out.data(), *scalePtr = scales.data();
        testing::launch(entry, 2, 4, {&inPtr, &outPtr, &scalePtr, &tokenArg});
        for (int t = 0; t < tokens; ++t) {
          for (int b = 0; b < blocks32; ++b) {
            const int start = b * 32, count = std::min(32, hidden - start);
            float x[32];
            uint8_t expected[16];
            for (int i = 0; i < count; ++i) x[i] = decode_bf16(in[size_t(t) * hidden + start + i]);
            const uint8_t scale = quantize_mx_block(x, count, MxElement::E2M1, expected);
            ASSERT_EQ(scales[size_t(t) * blocks32 + b], scale) << "token " << t << " block " << b;
            for (int i = 0; i < (count + 1) / 2; ++i)
              ASSERT_EQ(out[(size_t(t) * hidden + start) / 2 + i], expected[i]) << "token " << t << " byte " << i;
          }
        }
        expectGuardsIntact(out, n / 2, kPoisonByte, "packed codes");
        expectGuardsIntact(scales, size_t(tokens) * blocks32, kPoisonByte, "scales");
        break;
      }
      case Kind::DequantizeDirect: {
        std::vector<uint8_t> in = randomBytes(n, seed);
        std::vector<uint16_t> out(n + kGuard, kPoisonBf16);
        void *inPtr = in.data(), *outPtr = out.data();
        testing::launch(entry, 2, 4, {&inPtr, &outPtr, &tokenArg});
        for (size_t i = 0; i < n; ++i)
          ASSERT_TRUE(sameBf16(out[i], encode_bf16(decode_fp8(in[i], fp8)))) << "element " << i << " code " << int(in[i]);
        expectGuardsIntact(out, n, kPoisonBf16, "values");
        break;
      }
      case Kind::DequantizeBlockwise: {
        std::vector<uint8_t> in = randomBytes(n, seed);
        std::vector<float> scales(size_t(tokens) * blocks128);
        std::mt19937 rng(seed);
        for (float& s : scales) s = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, int(rng() % 20) - 10);
        std::vector<uint16_t> out(n + kGuard, kPoisonBf16);
        void *inPtr = in.data(), *scalePtr = scales.data(), *outPtr = out.data();
        testing::launch(entry, 2, 4, {&inPtr, &scalePtr, &outPtr, &tokenArg});
        for (int t = 0; t < tokens; ++t)
          for (int i = 0; i < hidden; ++i) {
            const size_t at = size_t(t) * hidden + i;
            const uint16_t expected = encode_bf16(decode_fp8(in[at], fp8) * scales[size_t(t) * blocks128 + i / 128]);
            ASSERT_TRUE(sameBf16(out[at], expected)) << "token " << t << " element " << i;
          }
        expectGuardsIntact(out, n, kPoisonBf16, "values");
        break;
      }
      case Kind::DequantizeMx: {
        std::vector<uint8_t> in = randomBytes(n / 2, seed);
        std::vector<uint8_t> scales = randomBytes(size_t(tokens) * blocks32, seed + 1);
        for (size_t i = 0; i < size_t(tokens) * blocks32; ++i) scales[i] = uint8_t(100 + scales[i] % 60);
        if (tokens > 2) scales[1] = kE8M0NaN;  // a NaN block decodes to NaN
        std::vector<uint16_t> out(n + kGuard, kPoisonBf16);
        void *inPtr = in.data(), *scalePtr = scales.data(), *outPtr = out.data();
        testing::launch(entry, 2, 4, {&inPtr, &scalePtr, &outPtr, &tokenArg});
        for (int t = 0; t < tokens; ++t)
          for (int i = 0; i < hidden; ++i) {
            const size_t at = size_t(t) * hidden + i;
            const uint8_t nibble = uint8_t((in[at / 2] >> (at % 2 ? 4 : 0)) & 0xF);
            const float value = mx_decode_element(nibble, scales[size_t(t) * blocks32 + i / 32], MxElement::E2M1);
            ASSERT_TRUE(sameBf16(out[at], encode_bf16(value))) << "token " << t << " element " << i;
          }
        expectGuardsIntact(out, n, kPoisonBf16, "values");
        break;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, HostTemplate, ::testing::ValuesIn(allCases()),
                         [](const auto& info) { return caseName(info.param); });

}  // namespace
}  // namespace epjit
