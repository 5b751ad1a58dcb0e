ep.include "common"
func.func private @twice(%x: index) -> index {
  %c2 = arith.constant 2 : index
  %y = arith.muli %x, %c2 : index
  return %y : index
}
