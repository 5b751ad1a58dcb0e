// ep/counts: how many received tokens each local expert got in the last
// dispatch, counted on the device so grouped GEMMs can read them there with
// no host round trip. A token counts once per local expert it names (repeats
// and -1 slots skipped), as EpDispatchCombineOp::local_expert_counts() counts;
// with every_entry set, every (token, k) on a local expert counts, repeats
// too (MORI's rule).
ep.include "ep/common"
ep.include "ep/sync"

// Warp w of the grid takes received entries (row * top-k + j) w, w + warps,
// ... (the row's earlier ids read without a store between, for repeats); the counts
// gather with agent-scope atomics in one of @expert_count_buffers' two
// buffers, picked by @state_expert_counts' low bit, while the grid's last
// warp clears the other for the next count. The last block to finish
// copies them to `counts` and writes the received count after them
// (counts[experts_per_rank]), so a host reads both in one copy. (One block
// that cleared, met at its barrier and counted took a warp 256 rows of
// scalar reads at 4096 received tokens: hundreds of microseconds.) Launched
// on the op's stream after a dispatch, so the rows and the received count
// are this call's.
ep.kernel @ep_count_experts(%counts: !ep.ptr<i32>, %rank: index, %every_entry: index, %w: !ep.window)
    warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %one = arith.constant 1 : i32
  %true = arith.constant true
  %total_word = ep.constant_value @state_total_recv : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %counts_repeats = arith.cmpi ne, %every_entry, %c0 : index
  %counts_word = ep.constant_value @state_expert_counts : index
  %counted = ep.load %state[%counts_word] : !ep.ptr<i32>
  %parity_i32 = arith.andi %counted, %one : i32
  %parity = arith.index_cast %parity_i32 : i32 to index
  %counting_at = arith.muli %parity, %epr : index
  %clearing_at = arith.subi %epr, %counting_at : index
  %buffers = ep.peer_ptr %w[%rank] @expert_count_buffers[%c0] : !ep.ptr<i32>
  %counting = ep.ptr_add %buffers, %counting_at : !ep.ptr<i32>
  %first = ep.global_warp_index : index
  %warps = ep.global_warp_count : index
  %last_warp = arith.subi %warps, %c1 : index
  %clears = arith.cmpi eq, %first, %last_warp : index
  scf.if %clears {
    %zeros_at = arith.muli %epr, %c2 : index
    ep.warp.copy_row %buffers[%zeros_at], %buffers[%clearing_at], %epr : !ep.ptr<i32> -> !ep.ptr<i32>
  }
  %entries = arith.muli %total, %topk : index
  scf.for %at = %first to %entries step %warps {
    %j = arith.remui %at, %topk : index
    %row = arith.subi %at, %j : index
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
        %counts_it = arith.ori %fresh, %counts_repeats : i1
        scf.if %counts_it {
          %local = arith.remui %expert, %epr : index
          %before = ep.atomic_rmw add %counting[%local], %one scope(agent) order(relaxed) : !ep.ptr<i32>
        }
      }
    }
  }
  // The last block publishes the counts and the received count, and hands
  // the other buffer to the next count, which the stream runs after this one.
  ep.block_barrier
  %warp = ep.warp_index : index
  %lead = arith.cmpi eq, %warp, %c0 : index
  scf.if %lead {
    %arrivals = ep.constant_value @state_count_arrivals : index
    %last = func.call @count_block_arrival(%w, %rank, %arrivals) : (!ep.window, index, index) -> i1
    scf.if %last {
      %next = arith.addi %counted, %one : i32
      ep.store %next, %state[%counts_word] : !ep.ptr<i32>
      ep.fence scope(agent) order(acquire)
      ep.warp.copy_row %counting[%c0], %counts[%c0], %epr : !ep.ptr<i32> -> !ep.ptr<i32>
      ep.store %total_i32, %counts[%epr] : !ep.ptr<i32>
    }
  }
}
