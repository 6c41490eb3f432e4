// Malformed #tpu.sharding text: one broken rule per case, with its message
// at the line and column of the offending part.  --parsing-diagnostics prints
// each parse error and goes on with the next case.
// RUN: xtpu-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:68
// CHECK: invalid sharding: expected an integer, got '}'
func.func @trailing_comma(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,1]0,}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:69
// CHECK: invalid sharding: the text ends early: expected one of ',', 'device', 'devices', 'last_tile_dim_replicate', 'last_tile_dims', 'manual', 'maximal', 'replicated', '}'
func.func @unclosed_brace(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,1]0,1>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: invalid sharding: unexpected 'maximum': expected one of 'device', 'devices', 'last_tile_dim_replicate', 'last_tile_dims', 'manual', 'maximal', 'replicated', '}'
func.func @misspelt_keyword(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{maximum device=0}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: invalid sharding: tuple shardings are not supported: a #tpu.sharding describes one tensor
func.func @tuple(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{{replicated}, {maximal device=0}}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:64
// CHECK: invalid sharding: 'metadata=' is not supported in xtpu shardings; drop it
func.func @metadata(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{replicated metadata={op_name="a"}}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:64
// CHECK: invalid sharding: replicated shardings should not have any devices assigned
func.func @replicated_with_devices(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{replicated devices=[2]0,1}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: invalid sharding: maximal shardings should have exactly one device assigned: write {maximal device=N}
func.func @maximal_without_device(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{maximal}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:53
// CHECK: invalid sharding: non-maximal shardings must have a tile assignment list including dimensions
func.func @device_without_maximal(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{device=0}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:66
// CHECK: invalid sharding: tile assignment [2,2] has 4 tiles but 3 devices are listed
func.func @too_few_devices(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,2]0,1,2}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:72
// CHECK: invalid sharding: device 4 is out of range: a tile assignment of 4 tiles uses devices 0..3
func.func @device_out_of_range(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,2]0,1,2,4}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:70
// CHECK: invalid sharding: device 1 is listed twice
func.func @device_twice(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,2]0,1,1,3}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:66
// CHECK: invalid sharding: non-maximal shardings must have more than one device assigned (for one device write {maximal device=0})
func.func @one_device_tiled(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[1,1]0}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:66
// CHECK: invalid sharding: iota <=[8] lists 8 devices but the tile assignment [2,2] has 4 tiles
func.func @iota_count(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,2]<=[8]}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:73
// CHECK: invalid sharding: expected 'T(' to start sharding devices iota_transpose_perm after the 2-dimensional iota [2,2]
func.func @iota_without_transpose(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,2]<=[2,2]}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:77
// CHECK: invalid sharding: Out of range iota minor_to_major value 2
func.func @iota_bad_transpose(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,2]<=[2,2]T(1,2)}>} : tensor<4x2xf32>
  func.return
}

// -----

// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:74
// CHECK: invalid sharding: last_tile_dims={manual} is not supported by xtpu
func.func @manual_subgroup(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[2,1,2]<=[4] last_tile_dims={manual}}>} : tensor<4x2xf32>
  func.return
}

// -----

// A tile assignment is an array of its devices: a huge one was a MemoryError.
// CHECK: sharding-invalid.mlir:[[# @LINE + 3]]:61
// CHECK: invalid sharding: a tile assignment of 10000000000 devices is more than xtpu supports (65536)
func.func @huge_tile_assignment(%x: tensor<4x2xf32>) {
  %0 = hlo.negate %x {tpu.sharding = #tpu.sharding<{devices=[100000,100000]<=[10000000000]}>} : tensor<4x2xf32>
  func.return
}
