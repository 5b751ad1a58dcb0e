// ep-specialize keeps a kernel whose when(...) the bindings satisfy (and drops
// the condition), erases the others, and then the private helpers only they
// called; a helper a kept kernel calls stays.
// RUN: epjit-opt %s --ep-specialize=bind=world=4,nodes=2,mode=scatter,pack=false | FileCheck %s --check-prefix=SCATTER
// RUN: epjit-opt %s --ep-specialize=bind=world=4,nodes=4,mode=gather,pack=true | FileCheck %s --check-prefix=GATHER
// RUN: epjit-opt %s --ep-specialize=bind=world=4,nodes=4,mode=gather,pack=true | epjit-opt | FileCheck %s --check-prefix=GATHER
// RUN: epjit-opt %s | epjit-opt | FileCheck %s --check-prefix=ROUNDTRIP
// Clauses joined by `and` must all hold: only the third binding keeps @pack_across
// (the first fails two of them, the second the nodes one).
// RUN: epjit-opt %s --ep-specialize=bind=world=4,nodes=2,mode=gather,pack=true | FileCheck %s --check-prefix=ACROSS

ep.param @world : index {min = 1 : i64}
ep.param @nodes : index {min = 1 : i64}
ep.param @mode : index {names = ["gather", "scatter"]}
ep.param @pack : i1 {default_value = false}

// ROUNDTRIP: ep.kernel @gather() warps_per_block(4) when(@mode eq "gather")
// ROUNDTRIP: ep.kernel @scatter() warps_per_block(4) when(@mode ne 0)
// ROUNDTRIP: ep.kernel @forward() warps_per_block(4) when(@nodes lt @world)
// ROUNDTRIP: ep.kernel @packer() warps_per_block(4) when(@pack)
// ROUNDTRIP: ep.kernel @wide() warps_per_block(4) when(@world ge 8)
// ROUNDTRIP: ep.kernel @pack_across() warps_per_block(4) when(@pack and @nodes lt @world and @mode eq "gather")

// SCATTER-NOT: func.func private @gather_only
// SCATTER-NOT: ep.kernel @gather(
// SCATTER-NOT: when(
// SCATTER: func.func private @shared
// SCATTER: func.func private @forward_only
// SCATTER: ep.kernel @scatter() warps_per_block(4) attributes {ep.when = "@mode ne 0"} {
// SCATTER: ep.kernel @forward() warps_per_block(4) attributes {ep.when = "@nodes lt @world"} {
// SCATTER-NOT: ep.kernel @packer(
// SCATTER-NOT: ep.kernel @wide(
// SCATTER-NOT: ep.kernel @pack_across(

// GATHER-NOT: func.func private @forward_only
// GATHER: func.func private @gather_only
// GATHER: func.func private @shared
// GATHER-NOT: func.func private @forward_only
// GATHER: ep.kernel @gather() warps_per_block(4) attributes {ep.when = "@mode eq \22gather\22"} {
// GATHER-NOT: ep.kernel @scatter(
// GATHER-NOT: ep.kernel @forward(
// GATHER: ep.kernel @packer() warps_per_block(4) attributes {ep.when = "@pack"} {
// GATHER-NOT: ep.kernel @wide(
// GATHER-NOT: ep.kernel @pack_across(
// ACROSS: ep.kernel @pack_across() warps_per_block(4) attributes {ep.when = "@pack and @nodes lt @world and @mode eq \22gather\22"} {

func.func private @gather_only() {
  return
}
func.func private @shared() {
  return
}
func.func private @forward_only() {
  func.call @shared() : () -> ()
  return
}

ep.kernel @gather() warps_per_block(4) when(@mode eq "gather") {
  func.call @gather_only() : () -> ()
  func.call @shared() : () -> ()
}
ep.kernel @scatter() warps_per_block(4) when(@mode ne 0) {
  func.call @shared() : () -> ()
}
ep.kernel @forward() warps_per_block(4) when(@nodes lt @world) {
  func.call @forward_only() : () -> ()
}
ep.kernel @packer() warps_per_block(4) when(@pack) {
}
ep.kernel @wide() warps_per_block(4) when(@world ge 8) {
}
ep.kernel @pack_across() warps_per_block(4) when(@pack and @nodes lt @world and @mode eq "gather") {
}
