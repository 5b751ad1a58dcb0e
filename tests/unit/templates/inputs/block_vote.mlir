// ep.block_any twice in one kernel: bit 0 of each warp's flag is its first
// vote, bit 1 its second, so a block whose first vote was true and second
// false shows whether the vote word is cleared between votes.
ep.kernel @block_vote(%flags: !ep.ptr<i32>, %out: !ep.ptr<i32>) warps_per_block(4) {
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %bit0 = arith.constant 1 : i32
  %bit1 = arith.constant 2 : i32
  %warp = ep.global_warp_index : index
  %flag = ep.load %flags[%warp] : !ep.ptr<i32>
  %first_bit = arith.andi %flag, %bit0 : i32
  %first = arith.cmpi ne, %first_bit, %zero : i32
  %first_any = ep.block_any %first
  %second_bit = arith.andi %flag, %bit1 : i32
  %second = arith.cmpi ne, %second_bit, %zero : i32
  %second_any = ep.block_any %second
  %at = arith.muli %warp, %c2 : index
  %next = arith.addi %at, %c1 : index
  %first_word = arith.extui %first_any : i1 to i32
  %second_word = arith.extui %second_any : i1 to i32
  ep.store %first_word, %out[%at] : !ep.ptr<i32>
  ep.store %second_word, %out[%next] : !ep.ptr<i32>
}
