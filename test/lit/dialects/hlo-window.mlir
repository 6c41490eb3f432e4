// The windowed ops of dialects/hlo_window.py (StableHLO spec: convolution,
// reduce_window, select_and_scatter; hlo.reverse of dialects/hlo_math.py
// beside them): round trip in their custom and
// generic forms; the shape rules give the result types checked here.
// RUN: xtpu-opt %s | xtpu-opt | filecheck %s
// RUN: xtpu-opt %s --print-op-generic | xtpu-opt | filecheck %s

// NHWC input, HWIO kernel, stride 2, SAME-style padding with the odd pixel at the end.
// CHECK-LABEL: func.func @conv_nhwc
// CHECK-NEXT:    %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[1, 1], [0, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32>
func.func @conv_nhwc(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32> {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[1, 1], [0, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32>
  func.return %0 : tensor<2x3x3x4xf32>
}

// NCHW, a depthwise kernel (feature_group_count = channels), rhs dilation 2,
// the precision config carried; omitted window entries take their defaults.
// CHECK-LABEL: func.func @conv_nchw_depthwise
// CHECK-NEXT:    %0 = hlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 4 : i64, precision_config = "HIGHEST, HIGHEST"} : (tensor<1x4x9x9xf64>, tensor<8x1x3x3xf64>) -> tensor<1x8x5x5xf64>
func.func @conv_nchw_depthwise(%x: tensor<1x4x9x9xf64>, %w: tensor<8x1x3x3xf64>) -> tensor<1x8x5x5xf64> {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {rhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 4 : i64, precision_config = "HIGHEST, HIGHEST"} : (tensor<1x4x9x9xf64>, tensor<8x1x3x3xf64>) -> tensor<1x8x5x5xf64>
  func.return %0 : tensor<1x8x5x5xf64>
}

// A kernel gradient's form: batch groups, lhs dilation (a transposed
// convolution), negative padding, one spatial dimension.
// CHECK-LABEL: func.func @conv_batch_groups
// CHECK-NEXT:    %0 = hlo.convolution(%x, %w) dim_numbers = [f, 0, b]x[i, 0, o]->[b, 0, f], window = {stride = [1], pad = [[2, -1]], lhs_dilate = [2], rhs_dilate = [1]} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<3x4x6xf32>, tensor<3x2x4xf32>) -> tensor<3x7x4xf32>
func.func @conv_batch_groups(%x: tensor<3x4x6xf32>, %w: tensor<3x2x4xf32>) -> tensor<3x7x4xf32> {
  %0 = hlo.convolution(%x, %w) dim_numbers = [f, 0, b]x[i, 0, o]->[b, 0, f], window = {stride = [1], pad = [[2, -1]], lhs_dilate = [2], rhs_dilate = [1]} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<3x4x6xf32>, tensor<3x2x4xf32>) -> tensor<3x7x4xf32>
  func.return %0 : tensor<3x7x4xf32>
}

// A 2x2 max pool and its gradient.
// CHECK-LABEL: func.func @max_pool
// CHECK-NEXT:    %0 = hlo.reduce_window(%x init : %ninf) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x5x5x3xf32>, tensor<f32>) -> tensor<2x3x3x3xf32>
// CHECK-NEXT:    %1 = hlo.select_and_scatter(%x, %0 init : %zero) select "GE" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x5x5x3xf32>, tensor<2x3x3x3xf32>, tensor<f32>) -> tensor<2x5x5x3xf32>
func.func @max_pool(%x: tensor<2x5x5x3xf32>, %ninf: tensor<f32>, %zero: tensor<f32>) -> tensor<2x5x5x3xf32> {
  %0 = hlo.reduce_window(%x init : %ninf) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x5x5x3xf32>, tensor<f32>) -> tensor<2x3x3x3xf32>
  %1 = hlo.select_and_scatter(%x, %0 init : %zero) select "GE" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x5x5x3xf32>, tensor<2x3x3x3xf32>, tensor<f32>) -> tensor<2x5x5x3xf32>
  func.return %1 : tensor<2x5x5x3xf32>
}

// A windowed sum with base and window dilations.
// CHECK-LABEL: func.func @dilated_sum
// CHECK-NEXT:    %0 = hlo.reduce_window(%x init : %i) applies add dims = [3, 2], strides = [2, 1], base_dilations = [2, 1], window_dilations = [1, 2], pad = dense<[[1, 0], [0, 0]]> : tensor<2x2xi64> : (tensor<6x7xf64>, tensor<f64>) -> tensor<5x5xf64>
// CHECK-NEXT:    %1 = hlo.reverse %0, dims = [0] : tensor<5x5xf64>
func.func @dilated_sum(%x: tensor<6x7xf64>, %i: tensor<f64>) -> tensor<5x5xf64> {
  %0 = hlo.reduce_window(%x init : %i) applies add dims = [3, 2], strides = [2, 1], base_dilations = [2, 1], window_dilations = [1, 2], pad = dense<[[1, 0], [0, 0]]> : tensor<2x2xi64> : (tensor<6x7xf64>, tensor<f64>) -> tensor<5x5xf64>
  %1 = hlo.reverse %0, dims = [0] : tensor<5x5xf64>
  func.return %1 : tensor<5x5xf64>
}

// bfloat16 operands, a float32 result (the preferred element type: TPU
// accumulation kept in float32).
// CHECK-LABEL: func.func @conv_bf16_to_f32
// CHECK-NEXT:    %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {stride = [1], pad = {{\[\[}}0, 0]], lhs_dilate = [1], rhs_dilate = [1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x3xbf16>, tensor<3x3x4xbf16>) -> tensor<2x3x4xf32>
func.func @conv_bf16_to_f32(%x: tensor<2x5x3xbf16>, %w: tensor<3x3x4xbf16>) -> tensor<2x3x4xf32> {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x3xbf16>, tensor<3x3x4xbf16>) -> tensor<2x3x4xf32>
  func.return %0 : tensor<2x3x4xf32>
}
