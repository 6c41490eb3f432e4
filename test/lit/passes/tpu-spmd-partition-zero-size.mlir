// tpu-spmd-partition on zero-size values: every tile of a zero-size value is
// zero-size, so a reshape of one runs locally on the operand's tile as it is
// laid out (no collective, no slice), whatever the shardings; the rule for
// non-empty reshapes (contiguous chunks) would divide by the zero dimension.
// RUN: xtpu-opt %s --split-input-file -p tpu-spmd-partition | filecheck %s

// [2, 0] -> [2, 0, 1] tiled [2, 1, 1] (found by the fuzzer: ZeroDivisionError).
// CHECK-LABEL: func @zero_size_reshape_split_result
// CHECK:         as %x: tensor<2x0xf32>)
// CHECK-NEXT:      %rs = hlo.reshape %x : (tensor<2x0xf32>) -> tensor<1x0x1xf32>
// CHECK-NEXT:      tpu.yield %rs : tensor<1x0x1xf32>
// CHECK-NOT:     ccl.
func.func @zero_size_reshape_split_result(%a: tensor<2x0xf32>) -> tensor<2x0x1xf32> {
  %r = tpu.replicate([%a] as %x: tensor<2x0xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{replicated}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1,1]0,1}>]} {
    %rs = hlo.reshape %x {tpu.sharding = [#tpu.sharding<{devices=[2,1,1]0,1}>]} : (tensor<2x0xf32>) -> tensor<2x0x1xf32>
    tpu.yield %rs : tensor<2x0x1xf32>
  }
  func.return %r : tensor<2x0x1xf32>
}

// -----

// A tiled zero-size operand ([0, 4] tiled [1, 2]) to a tiled result
// ([4, 0] tiled [2, 1]): the local tiles reshape, nothing is gathered.
// CHECK-LABEL: func @zero_size_reshape_split_both
// CHECK:         as %x: tensor<0x2xf32>)
// CHECK-NEXT:      %rs = hlo.reshape %x : (tensor<0x2xf32>) -> tensor<2x0xf32>
// CHECK-NEXT:      tpu.yield %rs : tensor<2x0xf32>
// CHECK-NOT:     ccl.
func.func @zero_size_reshape_split_both(%a: tensor<0x4xf32>) -> tensor<4x0xf32> {
  %r = tpu.replicate([%a] as %x: tensor<0x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[1,2]0,1}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1]0,1}>]} {
    %rs = hlo.reshape %x {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : (tensor<0x4xf32>) -> tensor<4x0xf32>
    tpu.yield %rs : tensor<4x0xf32>
  }
  func.return %r : tensor<4x0xf32>
}

// -----

// Replicated result of a tiled zero-size operand: the whole (empty) value is
// the local reshape of the (empty) tile.
// CHECK-LABEL: func @zero_size_reshape_replicated_result
// CHECK:         as %x: tensor<2x0xf32>)
// CHECK-NEXT:      %rs = hlo.reshape %x : (tensor<2x0xf32>) -> tensor<0x4xf32>
// CHECK-NEXT:      tpu.yield %rs : tensor<0x4xf32>
// CHECK-NOT:     ccl.
func.func @zero_size_reshape_replicated_result(%a: tensor<4x0xf32>) -> tensor<0x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<4x0xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,1]0,1}>], tpu.output_shardings = [#tpu.sharding<{replicated}>]} {
    %rs = hlo.reshape %x {tpu.sharding = [#tpu.sharding<{replicated}>]} : (tensor<4x0xf32>) -> tensor<0x4xf32>
    tpu.yield %rs : tensor<0x4xf32>
  }
  func.return %r : tensor<0x4xf32>
}

// -----

// A slice to a zero-size result cuts nothing: each core's (empty) tile is a
// constant, no halo exchange or gather; a pad of a zero-size operand is all
// padding: the value spread over the core's tile.
// CHECK-LABEL: func @zero_size_slice_and_pad
// CHECK:         %s = hlo.constant dense<> : tensor<0x4xf32>
// CHECK-NEXT:    %z = hlo.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %p = hlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
// CHECK-NEXT:    tpu.yield %s, %p : tensor<0x4xf32>, tensor<4x4xf32>
// CHECK-NOT:     ccl.
func.func @zero_size_slice_and_pad(%a: tensor<8x4xf32>, %b: tensor<0x4xf32>) -> (tensor<0x4xf32>, tensor<8x4xf32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%b] as %y: tensor<0x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[2,1]0,1}>, #tpu.sharding<{replicated}>], tpu.output_shardings = [#tpu.sharding<{devices=[2,1]0,1}>, #tpu.sharding<{devices=[2,1]0,1}>]} {
    %s = hlo.slice %x, start = [3, 0], limit = [3, 4], strides = [1, 1] {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : (tensor<8x4xf32>) -> tensor<0x4xf32>
    %z = hlo.constant {tpu.sharding = [#tpu.sharding<{replicated}>]} dense<1.0> : tensor<f32>
    %p = hlo.pad %y, %z, low = [4, 0], high = [4, 0], interior = [0, 0] {tpu.sharding = [#tpu.sharding<{devices=[2,1]0,1}>]} : (tensor<0x4xf32>, tensor<f32>) -> tensor<8x4xf32>
    tpu.yield %s, %p : tensor<0x4xf32>, tensor<8x4xf32>
  }
  func.return %r#0, %r#1 : tensor<0x4xf32>, tensor<8x4xf32>
}

// -----

// A concatenation whose result is zero-size along the split dimension
// ([1, 0] x 2 along dim 1, tiled [1, 2]; found by the fuzzer: an
// AssertionError, no window had anything to assemble): the empty tiles
// concatenate locally, nothing moves.  The partitioned op has no
// tpu.sharding left (the unpartitioned one keeps it: without the pass this
// case fails).
// CHECK-LABEL: func @zero_size_concat_split_dim
// CHECK:         as %x: tensor<1x0xf32>)
// CHECK-NEXT:      %c = hlo.concatenate %x, %x dim = 1 : (tensor<1x0xf32>, tensor<1x0xf32>) -> tensor<1x0xf32>
// CHECK-NEXT:      tpu.yield %c : tensor<1x0xf32>
// CHECK-NOT:     ccl.
func.func @zero_size_concat_split_dim(%a: tensor<1x0xf32>) -> tensor<1x0xf32> {
  %r = tpu.replicate([%a] as %x: tensor<1x0xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64, tpu.input_shardings = [#tpu.sharding<{devices=[1,2]0,1}>], tpu.output_shardings = [#tpu.sharding<{devices=[1,2]0,1}>]} {
    %c = hlo.concatenate %x, %x dim = 1 {tpu.sharding = [#tpu.sharding<{devices=[1,2]0,1}>]} : (tensor<1x0xf32>, tensor<1x0xf32>) -> tensor<1x0xf32>
    tpu.yield %c : tensor<1x0xf32>
  }
  func.return %r : tensor<1x0xf32>
}
