// A parameter bounded by a target fact (at_most = "wave_size") is checked
// against the target the module is built for: the bound travels from
// ep-specialize to ep-check-target, which names the parameter, the fact and
// the target. The EP template bounds its world so (a combine warp indexes
// every rank with a lane): epjit-compile refuses world 33 for gfx1250.
// RUN: epjit-opt %s --ep-specialize=bind=world=32 --ep-check-target=target=gfx1250 | FileCheck %s --check-prefix=FITS
// RUN: epjit-opt %s --ep-specialize=bind=world=64 --ep-check-target=target=gfx942 | FileCheck %s --check-prefix=FITS
// RUN: not epjit-opt %s --ep-specialize=bind=world=33 --ep-check-target=target=gfx1250 2>&1 | FileCheck %s --check-prefix=OVER
// RUN: not epjit-opt %s --ep-specialize=bind=world=33 --ep-check-target=target=host 2>&1 | FileCheck %s --check-prefix=HOST
// RUN: epjit-opt %s --ep-specialize=bind=world=33 --ep-check-target=target=host-gfx942 | FileCheck %s --check-prefix=FITS
// RUN: not epjit-compile --template ep_dispatch_combine %{ep_low_latency} --set world=33 --target gfx1250 --emit hip 2>&1 | FileCheck %s --check-prefix=TEMPLATE
// RUN: epjit-compile --template list | FileCheck %s --check-prefix=LIST

// FITS: ep.target_bounds = {world = "wave_size"}
// OVER: error: parameter 'world' = 33 exceeds its bound at_most = "wave_size": the wave size of gfx1250 is 32
// HOST: error: parameter 'world' = 33 exceeds its bound at_most = "wave_size": the wave size of host is 32
// TEMPLATE: error: parameter 'world' = 33 exceeds its bound at_most = "wave_size": the wave size of gfx1250 is 32
// LIST: {{^}}ep_dispatch_combine
// LIST-NEXT: token_words
// LIST: world : index (min 1, at_most the target's wave_size)
ep.param @world : index {min = 1 : i64, at_most = "wave_size"}

