#include "numerics_table.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "epjit/numerics.h"

namespace epjit::info {
namespace {

// A format as the table sees it: its code width, how to decode a code, and
// how to encode a float (saturating, as kernels do).
struct FormatView {
  const char* name;
  int code_bits;
  int mantissa_bits;
  std::function<float(uint32_t)> decode;
  std::function<uint32_t(float)> encode;
};

std::vector<FormatView> formats() {
  std::vector<FormatView> views;
  for (Fp8Format f : {Fp8Format::E4M3FN, Fp8Format::E4M3FNUZ, Fp8Format::E5M2, Fp8Format::E5M2FNUZ}) {
    const bool e4m3 = f == Fp8Format::E4M3FN || f == Fp8Format::E4M3FNUZ;
    views.push_back({fp8_format_name(f), 8, e4m3 ? 3 : 2,
                     [f](uint32_t c) { return decode_fp8(uint8_t(c), f); },
                     [f](float x) { return uint32_t(encode_fp8(x, f, Overflow::Saturate)); }});
  }
  views.push_back({"e2m1", 4, 1, [](uint32_t c) { return decode_fp4_e2m1(uint8_t(c)); },
                   [](float x) { return uint32_t(encode_fp4_e2m1(x)); }});
  views.push_back({"e8m0", 8, 0, [](uint32_t c) { return decode_e8m0(uint8_t(c)); },
                   [](float x) { return uint32_t(encode_e8m0(x)); }});
  views.push_back({"bf16", 16, 7, [](uint32_t c) { return decode_bf16(uint16_t(c)); },
                   [](float x) { return uint32_t(encode_bf16(x)); }});
  return views;
}

std::string hex_code(uint32_t code, int bits) { return fmt::format("0x{:0{}x}", code, (bits + 3) / 4); }

// Codes with a property, written as ranges: "0x7d-0x7f 0xfd-0xff".
std::string code_ranges(const FormatView& f, const std::function<bool(float, uint32_t)>& has) {
  std::string text;
  const uint32_t count = 1u << f.code_bits;
  for (uint32_t c = 0; c < count; ++c) {
    if (!has(f.decode(c), c)) continue;
    uint32_t last = c;
    while (last + 1 < count && has(f.decode(last + 1), last + 1)) ++last;
    if (!text.empty()) text += ' ';
    text += hex_code(c, f.code_bits);
    if (last != c) text += "-" + hex_code(last, f.code_bits);
    c = last;
  }
  return text.empty() ? "none" : text;
}

}  // namespace

void print_numerics_table(std::ostream& out) {
  using numerics_detail::bits_of;
  const std::vector<FormatView> views = formats();
  out << "Formats (facts computed by numerics/include/epjit/numerics.h)\n";
  out << fmt::format("{:<9} {:>4} {:>12} {:>8}  {:<28} {:<11} {}\n", "format", "bias", "max finite",
                     "max code", "NaN codes", "Inf", "-0");
  for (const FormatView& f : views) {
    float max_finite = 0.0f;
    uint32_t max_code = 0;
    for (uint32_t c = 0; c < (1u << f.code_bits); ++c) {
      const float v = f.decode(c);
      if (numerics_detail::is_finite(v) && v > max_finite) max_finite = v, max_code = c;
    }
    const int one_exponent_field = int(f.encode(1.0f) >> f.mantissa_bits);
    const std::string nan = code_ranges(f, [](float v, uint32_t) { return numerics_detail::is_nan(v); });
    const std::string inf = code_ranges(f, [](float v, uint32_t) {
      return !numerics_detail::is_nan(v) && !numerics_detail::is_finite(v);
    });
    const std::string negative_zero =
        code_ranges(f, [](float v, uint32_t) { return bits_of(v) == numerics_detail::kF32SignMask; });
    out << fmt::format("{:<9} {:>4} {:>12g} {:>8}  {:<28} {:<11} {}\n", f.name, one_exponent_field,
                       max_finite, hex_code(max_code, f.code_bits), nan, inf, negative_zero);
  }

  out << "\nEncodings (round to nearest even; fp8 and e2m1 saturating, as kernels quantize; e8m0 and bf16 as a cast)\n";
  out << fmt::format("{:<9}", "value");
  for (const FormatView& f : views) out << fmt::format(" {:>8}", f.name);
  out << '\n';
  constexpr std::array kValues = {1.0f, 0.75f, 2.5f, 300.0f, 464.0f, 465.0f, -1e-9f, 1e6f};
  for (float x : kValues) {
    out << fmt::format("{:<9g}", x);
    for (const FormatView& f : views) out << fmt::format(" {:>8}", hex_code(f.encode(x), f.code_bits));
    out << '\n';
  }
}

}  // namespace epjit::info
