// ep/layout: what a dispatch of a batch's top-k would send, before it runs
// (DeepEP's get_dispatch_layout): the tokens each rank gets, the entries each
// expert gets, and which ranks each token goes to. Frameworks read these to
// size and plan their expert work; one launch where a framework layer would
// run several tensor ops.
ep.include "ep/common"

// A warp per token (warp w takes tokens w, w + warps, ... of the grid). The
// top-k are int64 (frameworks' index type); -1, any negative, and experts
// past the last count nowhere (the dispatch refuses the latter with its
// error). Every entry counts for its expert, repeats too; a token counts
// once for each rank it goes to. `per_rank` and `per_expert` start zeroed
// (the runtime fills them on the stream first); in_rank[t * world + r] is 1
// or 0.
ep.kernel @ep_dispatch_layout(%indices: !ep.ptr<i64>, %tokens: index, %per_rank: !ep.ptr<i32>,
                              %per_expert: !ep.ptr<i32>, %in_rank: !ep.ptr<i8>) warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %zero_i64 = arith.constant 0 : i64
  %one_i64 = arith.constant 1 : i64
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %epr = ep.param_value @experts_per_rank : index
  %experts = arith.muli %world, %epr : index
  %experts_i64 = arith.index_cast %experts : index to i64
  %first = ep.global_warp_index : index
  %warps = ep.global_warp_count : index
  scf.for %t = %first to %tokens step %warps {
    %row = arith.muli %t, %topk : index
    %mask = scf.for %j = %c0 to %topk step %c1 iter_args(%bits = %zero_i64) -> (i64) {
      %at = arith.addi %row, %j : index
      %expert_i64 = ep.load %indices[%at] : !ep.ptr<i64>
      %not_negative = arith.cmpi sge, %expert_i64, %zero_i64 : i64
      %in_range = arith.cmpi slt, %expert_i64, %experts_i64 : i64
      %valid = arith.andi %not_negative, %in_range : i1
      %more = scf.if %valid -> (i64) {
        %expert = arith.index_cast %expert_i64 : i64 to index
        %before = ep.atomic_rmw add %per_expert[%expert], %one scope(agent) order(relaxed) : !ep.ptr<i32>
        %owner = arith.divui %expert, %epr : index
        %owner_i64 = arith.index_cast %owner : index to i64
        %bit = arith.shli %one_i64, %owner_i64 : i64
        %with = arith.ori %bits, %bit : i64
        scf.yield %with : i64
      } else {
        scf.yield %bits : i64
      }
      scf.yield %more : i64
    }
    %cells = arith.muli %t, %world : index
    scf.for %r = %c0 to %world step %c1 {
      %r_i64 = arith.index_cast %r : index to i64
      %shifted = arith.shrui %mask, %r_i64 : i64
      %bit = arith.andi %shifted, %one_i64 : i64
      %flag = arith.trunci %bit : i64 to i8
      %cell = arith.addi %cells, %r : index
      ep.store %flag, %in_rank[%cell] : !ep.ptr<i8>
      %goes = arith.cmpi ne, %bit, %zero_i64 : i64
      scf.if %goes {
        %before = ep.atomic_rmw add %per_rank[%r], %one scope(agent) order(relaxed) : !ep.ptr<i32>
      }
    }
  }
}
