// ep/counts: how many received tokens each local expert got in the last
// dispatch, counted on the device so grouped GEMMs can read them there with
// no host round trip. A token counts once per local expert it names (repeats
// and -1 slots skipped), as EpDispatchCombineOp::local_expert_counts() counts;
// with every_entry set, every (token, k) on a local expert counts, repeats
// too (MORI's rule).
ep.include "ep/common"
ep.include "ep/sync"

// One block: its warps clear `counts`, meet at the block barrier, then count
// the received rows (warp w takes rows w, w + warps, ...) with agent-scope
// atomics; warp 0 also writes the received count after the experts' counts
// (counts[experts_per_rank]), so a host reads both in one copy. Launched on
// the op's stream after a dispatch, so the rows and the received count are
// this call's.
ep.kernel @ep_count_experts(%counts: !ep.ptr<i32>, %rank: index, %every_entry: index, %w: !ep.window)
    warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  %true = arith.constant true
  %total_word = ep.constant_value @state_total_recv : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %counts_repeats = arith.cmpi ne, %every_entry, %c0 : index
  %warp = ep.warp_index : index
  %all_warps = ep.global_warp_count : index
  %blocks = ep.block_count : index
  %warps = arith.divui %all_warps, %blocks : index
  scf.for %e = %warp to %epr step %warps {
    ep.store %zero, %counts[%e] : !ep.ptr<i32>
  }
  %lead = arith.cmpi eq, %warp, %c0 : index
  scf.if %lead {
    ep.store %total_i32, %counts[%epr] : !ep.ptr<i32>
  }
  ep.block_barrier
  scf.for %i = %warp to %total step %warps {
    %row = arith.muli %i, %topk : index
    scf.for %j = %c0 to %topk step %c1 {
      %at = arith.addi %row, %j : index
      %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
      %invalid = func.call @invalid_expert(%expert_i32) : (i32) -> i1
      %valid = arith.xori %invalid, %true : i1
      scf.if %valid {
        %expert = arith.index_cast %expert_i32 : i32 to index
        %owner = arith.divui %expert, %epr : index
        %here = arith.cmpi eq, %owner, %rank : index
        scf.if %here {
          %repeat = func.call @expert_repeats_earlier(%indices, %row, %j) : (!ep.ptr<i32>, index, index) -> i1
          %fresh = arith.xori %repeat, %true : i1
          %counted = arith.ori %fresh, %counts_repeats : i1
          scf.if %counted {
            %local = arith.remui %expert, %epr : index
            %before = ep.atomic_rmw add %counts[%local], %one scope(agent) order(relaxed) : !ep.ptr<i32>
          }
        }
      }
    }
  }
}
