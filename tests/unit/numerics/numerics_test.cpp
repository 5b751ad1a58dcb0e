// numerics.h against an independent implementation: ml_dtypes for every code
// and every encode (tables made by make_reference.py at build time), and a
// float64 model for the MX and FP8-blockwise block rules.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "epjit/numerics.h"

namespace epjit {
namespace {

// ------------------------------------------------------------ reference files

template <class T>
std::vector<T> load(const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(EPJIT_NUMERICS_REFERENCE_DIR) / name;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("missing reference table " + path.string() +
                             ": build the target numerics_reference (needs the test venv)");
  }
  const auto bytes = std::filesystem::file_size(path);
  std::vector<T> data(bytes / sizeof(T));
  in.read(reinterpret_cast<char*>(data.data()), std::streamsize(data.size() * sizeof(T)));
  return data;
}

const std::vector<float>& encode_inputs() {
  static const std::vector<float> inputs = load<float>("encode_inputs.f32");
  return inputs;
}

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Bit-equal, except that any NaN equals any NaN.
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b); }

std::string hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Runs check(i, message) for i in [0, n); a failing check fills in message.
// Reports the number of failures and the first few messages.
void expect_all(size_t n, const std::string& what,
                const std::function<bool(size_t, std::string&)>& check) {
  size_t failures = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    std::string message;
    if (check(i, message)) continue;
    if (++failures <= 8) first += "\n  " + message;
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << n << " differ" << first;
}

// ------------------------------------------------------------ worked examples

// The examples of NUMERICS.md, evaluated at compile time (numerics.h is constexpr).
static_assert(encode_fp8(1.0f, Fp8Format::E4M3FN) == 0x38);
static_assert(encode_fp8(1.0f, Fp8Format::E4M3FNUZ) == 0x40);
static_assert(encode_fp8(1.0f, Fp8Format::E5M2) == 0x3C);
static_assert(encode_fp8(1.0f, Fp8Format::E5M2FNUZ) == 0x40);
static_assert(encode_fp8(0.75f, Fp8Format::E4M3FN) == 0x34);
static_assert(encode_fp8(0.75f, Fp8Format::E4M3FNUZ) == 0x3C);
static_assert(encode_fp8(0.75f, Fp8Format::E5M2) == 0x3A);
static_assert(encode_fp8(0.75f, Fp8Format::E5M2FNUZ) == 0x3E);
static_assert(encode_fp8(300.0f, Fp8Format::E4M3FN) == 0x79);
static_assert(encode_fp8(464.0f, Fp8Format::E4M3FN) == 0x7E);  // a tie to even: 448
static_assert(encode_fp8(465.0f, Fp8Format::E4M3FN) == 0x7F);  // overflows to NaN
static_assert(encode_fp8(465.0f, Fp8Format::E4M3FN, Overflow::Saturate) == 0x7E);
static_assert(encode_fp8(-1e-9f, Fp8Format::E4M3FNUZ) == 0x00);  // FNUZ has no -0
static_assert(encode_fp4_e2m1(0.75f) == 0x2);
static_assert(encode_fp4_e2m1(2.5f) == 0x4);
static_assert(encode_fp4_e2m1(5.0f) == 0x6);
static_assert(encode_fp4_e2m1(300.0f) == 0x7);
static_assert(encode_fp4_e2m1(-1e-9f) == 0x8);
static_assert(fp8_max(Fp8Format::E4M3FN) == 448.0f && fp8_max(Fp8Format::E4M3FNUZ) == 240.0f);
static_assert(decode_fp8(0x7E, Fp8Format::E4M3FN) == 448.0f);
static_assert(decode_fp8(0x7F, Fp8Format::E4M3FNUZ) == 240.0f);
static_assert(decode_e8m0(127) == 1.0f && encode_e8m0(1.0f) == 127);
// Subnormals round half up like normals: 1.5 * 2^-127 is the first to give 2^-126.
static_assert(encode_e8m0(std::bit_cast<float>(0x005FFFFFu)) == 0);
static_assert(encode_e8m0(std::bit_cast<float>(0x00600000u)) == 1);
static_assert(encode_e8m0(std::bit_cast<float>(0x00000001u)) == 0);
static_assert(mx_scale_from_amax(0.0f, MxElement::E2M1) == 127);
static_assert(mx_scale_from_amax(6.0f, MxElement::E2M1) == 127);  // floor(log2 6) - 2 = 0
static_assert(mx_scale_from_amax(1.0f, MxElement::E4M3) == 127 - 8);

TEST(NumericsExamples, MaxValuesDecodeFromTheirCodes) {
  for (Fp8Format f : {Fp8Format::E4M3FN, Fp8Format::E4M3FNUZ, Fp8Format::E5M2, Fp8Format::E5M2FNUZ}) {
    float largest = 0.0f;
    for (int c = 0; c < 256; ++c) {
      const float v = decode_fp8(uint8_t(c), f);
      if (std::isfinite(v)) largest = std::max(largest, v);
    }
    EXPECT_EQ(largest, fp8_max(f)) << fp8_format_name(f);
  }
}

// ------------------------------------------------------------ FP8

struct Fp8Case {
  const char* name;
  Fp8Format format;
  int mantissa_bits;
  int bias;
};

constexpr Fp8Case kFp8Cases[] = {
    {"e4m3fn", Fp8Format::E4M3FN, 3, 7},
    {"e4m3fnuz", Fp8Format::E4M3FNUZ, 3, 8},
    {"e5m2", Fp8Format::E5M2, 2, 15},
    {"e5m2fnuz", Fp8Format::E5M2FNUZ, 2, 16},
};

// Distance between neighbouring values of a format at magnitude |v| (the
// subnormal step below the smallest normal).
double grid_ulp(double v, int mantissa_bits, int bias) {
  const int min_normal_exponent = 1 - bias;
  int exponent = v > 0 ? std::ilogb(v) : min_normal_exponent;
  if (exponent < min_normal_exponent) exponent = min_normal_exponent;
  return std::ldexp(1.0, exponent - mantissa_bits);
}

void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name; }

class Fp8Reference : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Reference, DecodesEveryCodeAsMlDtypes) {
  const Fp8Case c = GetParam();
  const std::vector<float> expected = load<float>(std::string("decode_") + c.name + ".f32");
  ASSERT_EQ(expected.size(), 256u);
  expect_all(256, "decode", [&](size_t i, std::string& msg) {
    const float got = decode_fp8(uint8_t(i), c.format);
    msg = hex(uint32_t(i)) + " -> " + std::to_string(got) + ", ml_dtypes " + std::to_string(expected[i]);
    return same_float(got, expected[i]);
  });
}

TEST_P(Fp8Reference, EncodesLikeACastBitExactly) {
  const Fp8Case c = GetParam();
  const std::vector<float>& x = encode_inputs();
  const std::vector<uint8_t> expected = load<uint8_t>(std::string("encode_") + c.name + ".u8");
  ASSERT_GE(x.size(), 1'000'000u);
  ASSERT_EQ(expected.size(), x.size());
  expect_all(x.size(), "encode ToNaN", [&](size_t i, std::string& msg) {
    const uint8_t got = encode_fp8(x[i], c.format, Overflow::ToNaN);
    if (got == expected[i]) return true;
    msg = "x=" + hex(bits(x[i])) + " got " + hex(got) + " ml_dtypes " + hex(expected[i]);
    return false;
  });
}

TEST_P(Fp8Reference, SaturatesLikeClampThenEncode) {
  const Fp8Case c = GetParam();
  const std::vector<float>& x = encode_inputs();
  const std::vector<uint8_t> expected = load<uint8_t>(std::string("encode_") + c.name + "_saturate.u8");
  ASSERT_EQ(expected.size(), x.size());
  expect_all(x.size(), "encode Saturate", [&](size_t i, std::string& msg) {
    const uint8_t got = encode_fp8(x[i], c.format, Overflow::Saturate);
    if (got == expected[i]) return true;
    msg = "x=" + hex(bits(x[i])) + " got " + hex(got) + " clamp+ml_dtypes " + hex(expected[i]);
    return false;
  });
}

TEST_P(Fp8Reference, BlockwiseMatchesFloat64Model) {
  const Fp8Case c = GetParam();
  const std::vector<float> blocks = load<float>("bw_blocks.f32");
  const std::vector<int32_t> lengths = load<int32_t>("bw_lengths.i32");
  const std::vector<float> scales = load<float>(std::string("bw_") + c.name + "_scales.f32");
  const std::vector<uint8_t> codes = load<uint8_t>(std::string("bw_") + c.name + "_codes.u8");
  const std::vector<float> dequant = load<float>(std::string("bw_") + c.name + "_dequant.f32");
  constexpr size_t kBlock = kFp8BlockwiseBlockSize;
  ASSERT_EQ(blocks.size(), lengths.size() * kBlock);
  expect_all(lengths.size(), "blockwise-128", [&](size_t b, std::string& msg) {
    const size_t n = size_t(lengths[b]);
    uint8_t got_codes[kBlock];
    float got_dequant[kBlock];
    std::memset(got_codes, 0xAB, sizeof got_codes);  // poison: unwritten codes show
    const float scale = quantize_fp8_block(&blocks[b * kBlock], n, c.format, got_codes);
    dequantize_fp8_block(got_codes, n, c.format, scale, got_dequant);
    if (!same_float(scale, scales[b])) {
      msg = "block " + std::to_string(b) + " scale " + std::to_string(scale) + " model " +
            std::to_string(scales[b]);
      return false;
    }
    for (size_t i = 0; i < n; ++i) {
      if (got_codes[i] != codes[b * kBlock + i] || !same_float(got_dequant[i], dequant[b * kBlock + i])) {
        msg = "block " + std::to_string(b) + " element " + std::to_string(i) + " code " +
              hex(got_codes[i]) + " model " + hex(codes[b * kBlock + i]);
        return false;
      }
    }
    return true;
  });
}

TEST_P(Fp8Reference, BlockwiseRoundTripIsWithinHalfAnUlp) {
  const Fp8Case c = GetParam();
  const std::vector<float> blocks = load<float>("bw_blocks.f32");
  const std::vector<int32_t> lengths = load<int32_t>("bw_lengths.i32");
  constexpr size_t kBlock = kFp8BlockwiseBlockSize;
  size_t finite_blocks = 0;
  expect_all(lengths.size(), "blockwise half-ulp", [&](size_t b, std::string& msg) {
    const float* x = &blocks[b * kBlock];
    const size_t n = size_t(lengths[b]);
    if (!std::isfinite(block_amax(x, n))) return true;
    ++finite_blocks;
    uint8_t q[kBlock];
    float y[kBlock];
    const float scale = quantize_fp8_block(x, n, c.format, q);
    dequantize_fp8_block(q, n, c.format, scale, y);
    for (size_t i = 0; i < n; ++i) {
      const double scaled = std::fabs(double(x[i]) / scale);
      // half an ulp of the format, plus the two float32 roundings (x/scale, code*scale)
      const double bound = 0.5 * grid_ulp(scaled, c.mantissa_bits, c.bias) * scale +
                           std::ldexp(std::fabs(double(x[i])), -22) + std::ldexp(1.0, -149);
      if (std::fabs(double(y[i]) - double(x[i])) > bound) {
        msg = "block " + std::to_string(b) + " x=" + std::to_string(x[i]) + " -> " + std::to_string(y[i]);
        return false;
      }
    }
    return true;
  });
  EXPECT_GT(finite_blocks, lengths.size() / 2);
}

// DeepEP's per-128 cast, both scale forms, against make_reference.py's numpy
// float32 model of DeepEP's kernel (and the UE8M0 byte of the rounded scale).
TEST(DeepEpFp8Reference, MatchesTheFloat32ModelOfDeepEpsCast) {
  const std::vector<float> blocks = load<float>("deepep_blocks.f32");
  const std::vector<int32_t> lengths = load<int32_t>("deepep_lengths.i32");
  constexpr size_t kBlock = kFp8BlockwiseBlockSize;
  ASSERT_EQ(blocks.size(), lengths.size() * kBlock);
  for (const bool rounded : {false, true}) {
    const std::string name = rounded ? "deepep_pow2" : "deepep_f32";
    const std::vector<float> scales = load<float>(name + "_scales.f32");
    const std::vector<uint8_t> codes = load<uint8_t>(name + "_codes.u8");
    expect_all(lengths.size(), name.c_str(), [&](size_t b, std::string& msg) {
      const size_t n = size_t(lengths[b]);
      if (n == 0) return true;  // an infinite amax: undefined in DeepEP
      uint8_t got[kBlock];
      std::memset(got, 0xAB, sizeof got);
      const float scale = quantize_fp8_deepep_block(&blocks[b * kBlock], n, rounded, got);
      if (!same_float(scale, scales[b])) {
        msg = "block " + std::to_string(b) + " scale " + std::to_string(scale) + " model " + std::to_string(scales[b]);
        return false;
      }
      if (rounded && decode_e8m0(ue8m0_of(scale)) != scale) {
        msg = "block " + std::to_string(b) + ": the UE8M0 byte of " + std::to_string(scale) + " is not it";
        return false;
      }
      for (size_t i = 0; i < n; ++i)
        if (got[i] != codes[b * kBlock + i]) {
          msg = "block " + std::to_string(b) + " element " + std::to_string(i) + " code " + hex(got[i]) + " model " +
                hex(codes[b * kBlock + i]);
          return false;
        }
      return true;
    });
  }
  // The floor of the amax and a hand case: a block of 1e-5s takes amax 1e-4.
  const float tiny[3] = {1e-5f, -1e-5f, 0.0f};
  uint8_t got[3];
  EXPECT_EQ(quantize_fp8_deepep_block(tiny, 3, false, got), 1e-4f * (1.0f / 448.0f));
  EXPECT_EQ(deepep_fp8_scale(448.0f, true).scale_inv, 1.0f);
  EXPECT_EQ(deepep_fp8_scale(449.0f, true).scale_inv, 2.0f);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, Fp8Reference, ::testing::ValuesIn(kFp8Cases),
                         [](const auto& info) { return std::string(info.param.name); });

// ------------------------------------------------------------ FP4 E2M1

TEST(Fp4E2M1, DecodesEveryCodeAsMlDtypes) {
  const std::vector<float> expected = load<float>("decode_e2m1.f32");
  ASSERT_EQ(expected.size(), 16u);
  expect_all(16, "decode e2m1", [&](size_t i, std::string& msg) {
    msg = hex(uint32_t(i));
    return same_float(decode_fp4_e2m1(uint8_t(i)), expected[i]);
  });
  // Only the low nibble counts.
  EXPECT_EQ(decode_fp4_e2m1(0xF7), 6.0f);
}

TEST(Fp4E2M1, EncodesAsMlDtypesSaturatingToSix) {
  const std::vector<float>& x = encode_inputs();
  const std::vector<uint8_t> expected = load<uint8_t>("encode_e2m1.u8");
  ASSERT_EQ(expected.size(), x.size());
  size_t compared = 0;
  expect_all(x.size(), "encode e2m1", [&](size_t i, std::string& msg) {
    if (expected[i] == 0xFF) return true;  // NaN input: no E2M1 reference, see below
    ++compared;
    const uint8_t got = encode_fp4_e2m1(x[i]);
    if (got == expected[i]) return true;
    msg = "x=" + hex(bits(x[i])) + " got " + hex(got) + " ml_dtypes " + hex(expected[i]);
    return false;
  });
  EXPECT_GE(compared, 1'000'000u);
}

TEST(Fp4E2M1, NaNAndInfEncodeAsSignedMax) {
  EXPECT_EQ(encode_fp4_e2m1(std::numeric_limits<float>::quiet_NaN()), 0x7);
  EXPECT_EQ(encode_fp4_e2m1(-std::numeric_limits<float>::quiet_NaN()), 0xF);
  EXPECT_EQ(encode_fp4_e2m1(std::numeric_limits<float>::infinity()), 0x7);
  EXPECT_EQ(encode_fp4_e2m1(-std::numeric_limits<float>::infinity()), 0xF);
}

// ------------------------------------------------------------ E8M0 and BF16

TEST(E8M0, DecodesEveryCodeAsMlDtypes) {
  const std::vector<float> expected = load<float>("decode_e8m0.f32");
  ASSERT_EQ(expected.size(), 256u);
  expect_all(256, "decode e8m0", [&](size_t i, std::string& msg) {
    msg = hex(uint32_t(i));
    return same_float(decode_e8m0(uint8_t(i)), expected[i]);
  });
}

TEST(E8M0, EncodesAsMlDtypes) {
  const std::vector<float>& x = encode_inputs();
  const std::vector<uint8_t> expected = load<uint8_t>("encode_e8m0.u8");
  ASSERT_EQ(expected.size(), x.size());
  expect_all(x.size(), "encode e8m0", [&](size_t i, std::string& msg) {
    const uint8_t got = encode_e8m0(x[i]);
    if (got == expected[i]) return true;
    msg = "x=" + hex(bits(x[i])) + " got " + hex(got) + " ml_dtypes " + hex(expected[i]);
    return false;
  });
}

TEST(Bf16, DecodesEveryCodeAsMlDtypes) {
  const std::vector<float> expected = load<float>("decode_bf16.f32");
  ASSERT_EQ(expected.size(), 65536u);
  expect_all(65536, "decode bf16", [&](size_t i, std::string& msg) {
    msg = hex(uint32_t(i));
    return same_float(decode_bf16(uint16_t(i)), expected[i]);
  });
}

TEST(Bf16, EncodesAsMlDtypesBitExactly) {
  const std::vector<float>& x = encode_inputs();
  const std::vector<uint16_t> expected = load<uint16_t>("encode_bf16.u16");
  ASSERT_EQ(expected.size(), x.size());
  // NaN included: ml_dtypes keeps the sign and makes it quiet, as encode_bf16 does.
  expect_all(x.size(), "encode bf16", [&](size_t i, std::string& msg) {
    const uint16_t got = encode_bf16(x[i]);
    if (got == expected[i]) return true;
    msg = "x=" + hex(bits(x[i])) + " got " + hex(got) + " ml_dtypes " + hex(expected[i]);
    return false;
  });
}

// ------------------------------------------------------------ MX blocks

struct MxCase {
  const char* name;
  MxElement element;
  int mantissa_bits;
  int bias;
  float max;
};

constexpr MxCase kMxCases[] = {
    {"e2m1", MxElement::E2M1, 1, 1, 6.0f},
    {"e4m3", MxElement::E4M3, 3, 7, 448.0f},
    {"e5m2", MxElement::E5M2, 2, 15, 57344.0f},
};

void PrintTo(const MxCase& c, std::ostream* os) { *os << c.name; }

class MxReference : public ::testing::TestWithParam<MxCase> {};

uint8_t unpacked_code(const uint8_t* packed, size_t i, MxElement e) {
  return e == MxElement::E2M1 ? uint8_t((packed[i / 2] >> (i % 2 ? 4 : 0)) & 0xF) : packed[i];
}

TEST_P(MxReference, MatchesFloat64Model) {
  const MxCase c = GetParam();
  const std::vector<float> blocks = load<float>("mx_blocks.f32");
  const std::vector<int32_t> lengths = load<int32_t>("mx_lengths.i32");
  const std::vector<uint8_t> scales = load<uint8_t>(std::string("mx_") + c.name + "_scales.u8");
  const std::vector<uint8_t> codes = load<uint8_t>(std::string("mx_") + c.name + "_codes.u8");
  const std::vector<float> dequant = load<float>(std::string("mx_") + c.name + "_dequant.f32");
  constexpr size_t kBlock = kMxBlockSize;
  ASSERT_EQ(blocks.size(), lengths.size() * kBlock);
  expect_all(lengths.size(), std::string("mx ") + c.name, [&](size_t b, std::string& msg) {
    const size_t n = size_t(lengths[b]);
    uint8_t packed[kBlock];
    float got[kBlock];
    std::memset(packed, 0xAB, sizeof packed);
    const uint8_t scale = quantize_mx_block(&blocks[b * kBlock], n, c.element, packed);
    dequantize_mx_block(packed, n, c.element, scale, got);
    if (scale != scales[b]) {
      msg = "block " + std::to_string(b) + " scale " + hex(scale) + " model " + hex(scales[b]);
      return false;
    }
    // FP4 packs two per byte; an odd tail leaves the last high nibble zero.
    if (c.element == MxElement::E2M1 && n % 2 == 1 && (packed[n / 2] >> 4) != 0) {
      msg = "block " + std::to_string(b) + " odd tail high nibble not zero";
      return false;
    }
    for (size_t i = 0; i < n; ++i) {
      const uint8_t code = unpacked_code(packed, i, c.element);
      if (code != codes[b * kBlock + i] || !same_float(got[i], dequant[b * kBlock + i])) {
        msg = "block " + std::to_string(b) + " element " + std::to_string(i) + " code " + hex(code) +
              " model " + hex(codes[b * kBlock + i]) + " value " + std::to_string(got[i]) + " model " +
              std::to_string(dequant[b * kBlock + i]);
        return false;
      }
    }
    return true;
  });
}

TEST_P(MxReference, RoundTripIsWithinHalfAnUlpOrSaturated) {
  const MxCase c = GetParam();
  const std::vector<float> blocks = load<float>("mx_blocks.f32");
  const std::vector<int32_t> lengths = load<int32_t>("mx_lengths.i32");
  constexpr size_t kBlock = kMxBlockSize;
  expect_all(lengths.size(), std::string("mx half-ulp ") + c.name, [&](size_t b, std::string& msg) {
    const float* x = &blocks[b * kBlock];
    const size_t n = size_t(lengths[b]);
    uint8_t packed[kBlock];
    float y[kBlock];
    const uint8_t scale = quantize_mx_block(x, n, c.element, packed);
    dequantize_mx_block(packed, n, c.element, scale, y);
    if (scale == kE8M0NaN) {
      for (size_t i = 0; i < n; ++i) {
        if (!std::isnan(y[i])) return msg = "non-finite block decodes to a number", false;
      }
      return true;
    }
    const double step = std::ldexp(1.0, int(scale) - 127);
    for (size_t i = 0; i < n; ++i) {
      const double scaled = std::fabs(double(x[i])) / step;
      const double error = std::fabs(double(y[i]) - double(x[i]));
      const bool ok = scaled > c.max
                          ? double(std::fabs(y[i])) == c.max * step
                          : error <= 0.5 * grid_ulp(scaled, c.mantissa_bits, c.bias) * step +
                                         std::ldexp(1.0, -149);
      if (!ok) {
        msg = "block " + std::to_string(b) + " x=" + std::to_string(x[i]) + " -> " + std::to_string(y[i]);
        return false;
      }
    }
    return true;
  });
}

INSTANTIATE_TEST_SUITE_P(AllElements, MxReference, ::testing::ValuesIn(kMxCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace epjit
