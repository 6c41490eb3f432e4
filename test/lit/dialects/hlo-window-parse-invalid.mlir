// hlo.convolution's parser: a malformed dim_numbers or window is an error at
// the place it is written (--parsing-diagnostics goes on with the next case).
// RUN: xtpu-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// CHECK: hlo-window-parse-invalid.mlir:[[# @LINE + 3]]:86
// CHECK: hlo.convolution: input dimension labels [b, 0, 0, f] must be b, f and the spatial dimensions 0..1, each once
func.func @repeated_label(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 0, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: hlo.convolution: kernel dimension labels [0, 1, i, f] must be o, i and the spatial dimensions 0..1, each once
func.func @kernel_label(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, f]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: hlo.convolution: unknown window entry 'stride_by'
func.func @window_entry(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride_by = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}
