// Flagged rows: the low-latency combine's transport (NCCL's LL protocol).
// Every 8 data bytes travel in a 16-byte line with the call's flag twice,
// {data0, flag, data1, flag}, each 8-byte half written and read as one
// single-copy-atomic access. A reader that finds the flag in both halves has
// the data: no fence and no separate signal between the writer's store and
// the reader's use. A row of `count` elements of T takes whole lines, 2 *
// count elements' bytes rounded up to 16, and starts on a 16-byte boundary.
//
// The including target prelude defines, in namespace epjit, before this
// header: `Vec16 load_line(const Vec16*)` and `void store_line(Vec16*, const
// Vec16&)` (each 8-byte half single-copy atomic and coherent with peers at
// system scope), and `WaitClock`, its lane_wait_until clock.
#pragma once

#include "epjit/targets/common/chunks.h"

namespace epjit::prim {

// What a wait for a line needs: the call's flag, and the bounded-wait
// contract of lane_wait_until (give up after timeout_ms, storing `code` in
// *error; give up at once once *error holds `code`).
struct LineWait {
  uint32_t flag;
  int32_t* error;
  int32_t code;
  int32_t timeout_ms;
};
EPJIT_HD LineWait line_wait(int32_t flag, int32_t* error, int32_t code, int32_t timeout_ms) {
  return {uint32_t(flag), error, code, timeout_ms};
}

// One source of a flagged sum: its lines at the summed range's first element
// (a flagged row's element 2 * i holds element i's line position), or, when
// `plain`, a plain row there, read as it lies and not awaited (the
// low-latency combine's contributions of this rank's own experts).
template <typename T>
struct FlaggedRow {
  const T* lines;
  bool live;
  bool plain;
};
template <typename T>
EPJIT_HD FlaggedRow<T> flagged_source(bool live, const T* lines) {
  return {lines, live, false};
}
template <typename T>
EPJIT_HD FlaggedRow<T> flagged_source(bool live, const T* row, bool plain) {
  return {row, live, plain};
}

namespace detail {

// What a lane loads for a source that does not count: every lane loads a
// line for every source, live or not, so the loads of a group issue
// without a branch between them (AMD's compiler put each source's flag
// check before the next source's loads across such a branch). Never
// awaited.
#if defined(__NVCC__) || defined(__CUDACC_RTC__)
__device__ const Vec16 kNoLine = {{0, 0, 0, 0}};
#elif defined(__AMDGCN__)
__attribute__((device)) const Vec16 kNoLine = {{0, 0, 0, 0}};
#else
inline const Vec16 kNoLine = {{0, 0, 0, 0}};
#endif

// Lines holding `bytes` (at most 16) data bytes.
EPJIT_HD int lines_for(size_t bytes) { return bytes > 8 ? 2 : bytes > 0 ? 1 : 0; }

EPJIT_HD bool line_carries(const Vec16& line, uint32_t flag) { return line.w[1] == flag && line.w[3] == flag; }

// The line at `line` polled until it carries the flag, bounded as
// lane_wait_until bounds a wait, except that the error word is first read
// after kWaitPollsPerCheck polls, not before the first: a line is usually
// in flight when it is first awaited, and a read of the error word before
// reloading it would add a round trip to every such wait. For the same
// reason the first polls do not pause. On a failed wait the line is what
// was last seen (the op's error word says the call failed; its results are
// not read).
inline constexpr unsigned kLinePollsBeforePause = 8;

EPJIT_HD_COLD Vec16 poll_line(const Vec16* line, Vec16 seen, const LineWait& wait) {
  const uint64_t limit_ns = uint64_t(wait.timeout_ms < 1 ? 1 : wait.timeout_ms) * 1000000ull;
  const uint64_t start_ns = WaitClock::now_ns();
  for (unsigned poll = 1;; ++poll) {
    seen = load_line(line);
    if (line_carries(seen, wait.flag)) return seen;
    if (poll > kLinePollsBeforePause) WaitClock::pause(poll);
    if (poll % kWaitPollsPerCheck != 0) continue;
    if (WaitClock::load_error(wait.error) == wait.code) return seen;
    if (WaitClock::now_ns() - start_ns >= limit_ns) {
      WaitClock::store_error(wait.error, wait.code);
      return seen;
    }
  }
}

// The line at `line` once it carries the flag: `seen` (its first load) if
// it does already, which is the common case, else poll_line's.
EPJIT_HD Vec16 await_line(const Vec16* line, const Vec16& seen, const LineWait& wait) {
  return line_carries(seen, wait.flag) ? seen : poll_line(line, seen, wait);
}

// The lines of a lane's chunks start + k * stride (k < Unroll) of a row of
// `count` elements: full chunks from `held` (aligned rows), the partial one
// (and an unaligned row's every chunk) read from `src` now.
template <int Chunk, int Unroll, bool Aligned, typename T>
EPJIT_HD void store_flagged_chunks(const Vec16 (&held)[Unroll], const T* src, T* lines, size_t count, size_t start,
                                   size_t stride, int32_t flag) {
  const uint32_t f = uint32_t(flag);
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    const size_t at = start + size_t(k) * stride;
    if (at >= count) continue;
    const size_t n = count - at < size_t(Chunk) ? count - at : size_t(Chunk);
    const Vec16 data = Aligned && n == size_t(Chunk) ? held[k] : load16<false>(src + at, n);
    auto* out = reinterpret_cast<Vec16*>(lines + 2 * at);
    store_line(out, Vec16{{data.w[0], f, data.w[1], f}});
    if (lines_for(n * sizeof(T)) == 2) store_line(out + 1, Vec16{{data.w[2], f, data.w[3], f}});
  }
}

// The 16 data bytes of two lines.
EPJIT_HD Vec16 line_data(const Vec16& first, const Vec16& second) {
  return Vec16{{first.w[0], first.w[2], second.w[0], second.w[2]}};
}

}  // namespace detail

// Chunks of a row at elements start + k * stride (k < Unroll), each clipped
// to the row's `count` elements, into the flagged row `lines` (at the row's
// first element), as copy_chunks copies: a lane's full chunks are all loaded
// before the first line is stored; the partial chunk, if any, is read byte by
// byte when it is stored. A chunk's n elements go out as
// lines_for(n * sizeof(T)) lines, the bytes past n zero.
template <int Chunk, int Unroll, bool Aligned, typename T>
EPJIT_HD void copy_flagged_chunks(const T* src, T* lines, size_t count, size_t start, size_t stride, int32_t flag) {
  static_assert(Chunk * sizeof(T) == 16, "a chunk is 16 bytes of the row");
  // Every lane loads Unroll whole chunks without a branch per chunk (one past
  // the row reloads the row's first chunk and is not stored): in a branch of
  // its own, AMD's compiler built each line inside its chunk's load branch
  // and waited for that load before issuing the next.
  Vec16 held[Unroll];
  if (Aligned && count >= size_t(Chunk)) {
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      const size_t at = start + size_t(k) * stride;
      held[k] = load_global(reinterpret_cast<const Vec16*>(src + (at + Chunk <= count ? at : 0)));
    }
  }
  detail::store_flagged_chunks<Chunk, Unroll, Aligned>(held, src, lines, count, start, stride, flag);
}

// Stores what hold_chunks loaded with the same arguments into the flagged
// row `lines`, as put_chunks stores into a plain one.
template <int Chunk, int Unroll, bool Aligned, typename T>
EPJIT_HD void put_flagged_chunks(const HeldChunks<Unroll>& held, const T* src, T* lines, size_t count, size_t start,
                                 size_t stride, int32_t flag) {
  static_assert(Chunk * sizeof(T) == 16, "a chunk is 16 bytes of the row");
  detail::store_flagged_chunks<Chunk, Unroll, Aligned>(held.chunk, src, lines, count, start, stride, flag);
}

// Sources whose lines a lane loads before it awaits the first of them: 4
// sources x 2 lines x Unroll chunks. More (a top-k sum of weights over 8
// sources) would hold 16 lines of 4 registers at once: AMD's 1024-lane
// blocks, which have 128 registers a lane, spilled them.
inline constexpr int kFlaggedSourcesInFlight = 4;

// sum_chunks over flagged sources: the lines of every chunk of a group of
// live sources are loaded before the first is awaited (Unroll x
// kFlaggedSourcesInFlight x 2 loads in flight per lane), then each is
// awaited and its data kept (a plain source's chunk is taken as loaded);
// once all are in, the chunks are summed in source order and rounded once,
// as sum_chunks does with plain rows.
template <int Chunk, int Unroll, bool Aligned, typename Dst, typename T, typename... More>
EPJIT_HD void sum_flagged_chunks(Dst* dst, size_t count, size_t start, size_t stride, const LineWait& wait,
                                 const FlaggedRow<T>& first, const More&... more) {
  static_assert(Chunk * sizeof(T) == 16, "a chunk is 16 bytes of each source");
  constexpr int kSources = 1 + int(sizeof...(More));
  constexpr int kGroup = kSources < kFlaggedSourcesInFlight ? kSources : kFlaggedSourcesInFlight;
  const FlaggedRow<T> sources[kSources] = {first, more...};
  RowSource<T> as_rows[kSources];  // what add_in_order reads: which sources count
#pragma unroll
  for (int k = 0; k < kSources; ++k) as_rows[k] = row_source(sources[k].live, sources[k].lines);
  auto clipped = [&](size_t at) -> size_t {
    return at >= count ? 0 : count - at < size_t(Chunk) ? count - at : size_t(Chunk);
  };
  const Vec16 absent = {{0, wait.flag, 0, wait.flag}};
  Vec16 raw[Unroll][kSources];
#pragma unroll
  for (int group = 0; group < kSources; group += kGroup) {
    Vec16 line[Unroll][kGroup][2];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const size_t at = start + size_t(u) * stride;
      const int lines = detail::lines_for(clipped(at) * sizeof(T));
#pragma unroll
      for (int g = 0; g < kGroup && group + g < kSources; ++g) {
        const FlaggedRow<T>& source = sources[group + g];
        // A line past the range reloads the range's first one, a source that
        // does not count loads kNoLine (neither is awaited): no branch per
        // line, which made AMD wait for each load before the next. A plain
        // row's whole chunk is its first "line".
        const auto* first = source.live ? reinterpret_cast<const Vec16*>(source.lines) : &detail::kNoLine;
        const auto* from = reinterpret_cast<const Vec16*>(source.lines + (source.plain ? at : 2 * at));
        const bool whole = clipped(at) == size_t(Chunk);
        line[u][g][0] = load_line(source.live && (source.plain ? whole : lines > 0) ? from : first);
        line[u][g][1] = load_line(source.live && !source.plain && lines > 1 ? from + 1 : first);
      }
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const size_t at = start + size_t(u) * stride;
      const int lines = detail::lines_for(clipped(at) * sizeof(T));
#pragma unroll
      for (int g = 0; g < kGroup && group + g < kSources; ++g) {
        const FlaggedRow<T>& source = sources[group + g];
        if (source.plain) {
          // A row's tail chunk (never a combine's: rows hold whole chunks) byte by byte.
          const size_t n = clipped(at);
          raw[u][group + g] = !source.live || n == 0 || n == size_t(Chunk)
                                  ? line[u][g][0]
                                  : detail::load16<false>(source.lines + at, n);
          continue;
        }
        const auto* from = reinterpret_cast<const Vec16*>(source.lines + 2 * at);
        const bool low = source.live && lines > 0, high = source.live && lines > 1;
        raw[u][group + g] = detail::line_data(low ? detail::await_line(from, line[u][g][0], wait) : absent,
                                              high ? detail::await_line(from + 1, line[u][g][1], wait) : absent);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < Unroll; ++u) {
    const size_t at = start + size_t(u) * stride;
    float acc[Chunk];
    detail::add_in_order<Chunk, detail::WidenRows>(raw[u], as_rows, at, acc);
    store_row<Chunk, Aligned>(dst + at, clipped(at), acc);
  }
}

}  // namespace epjit::prim
