// The windowed ops' verifiers (dialects/hlo_window.py): one broken StableHLO
// constraint per case, named as the spec numbers it.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics | filecheck %s

// CHECK: 'hlo.convolution' op lhs float32[2x5x6x3] and rhs float32[3x3x4] must have the same rank (C1)
func.func @conv_rank(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op window_strides [0, 1] must be positive (C3)
func.func @conv_stride(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [0, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op padding [[1, 1]] must have shape [2, 2] (C4)
func.func @conv_padding(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {pad = [[1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op kernel input feature size 4 must be the input feature size 3 / feature_group_count 1 = 3 (C14)
func.func @conv_features(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x4x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op input feature size 3 must be divisible by feature_group_count 2 (C11)
func.func @conv_groups(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op feature_group_count 3 or batch_group_count 2 must be 1 (C23)
func.func @conv_both_groups(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x1x6xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 2 : i64, feature_group_count = 3 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x1x6xf32>) -> tensor<1x3x4x6xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op input batch size 2 must be divisible by batch_group_count 4 (C10)
func.func @conv_batch_groups(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 4 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op inferred result type(s) (tensor<2x3x4x4xf32>) do not match the declared (tensor<2x5x6x4xf32>)
func.func @conv_result(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x5x6x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op precision_config ['FAST', 'DEFAULT'] must be two of DEFAULT, HIGH, HIGHEST (C24)
func.func @conv_precision(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = "FAST, DEFAULT"} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x4x4xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op window_dimensions [1, 0, 2, 1] must be positive (C5)
func.func @pool_window(%x: tensor<2x5x6x3xf32>, %i: tensor<f32>) {
  %0 = hlo.reduce_window(%x init : %i) applies max dims = [1, 0, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<f32>) -> tensor<2x5x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op window_dimensions [2, 2] needs 4 entries
func.func @pool_window_rank(%x: tensor<2x5x6x3xf32>, %i: tensor<f32>) {
  %0 = hlo.reduce_window(%x init : %i) applies max dims = [2, 2], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<f32>) -> tensor<2x5x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op padding [[0, 0], [0, 0]] must have shape [4, 2] (C12)
func.func @pool_padding(%x: tensor<2x5x6x3xf32>, %i: tensor<f32>) {
  %0 = hlo.reduce_window(%x init : %i) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<2x2xi64> : (tensor<2x5x6x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op window_strides [1, 2, -2, 1] must be positive (C7)
func.func @pool_stride(%x: tensor<2x5x6x3xf32>, %i: tensor<f32>) {
  %0 = hlo.reduce_window(%x init : %i) applies max dims = [1, 2, 2, 1], strides = [1, 2, -2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op init_value must be a scalar of the operand's dtype float32, got float64[] (C3)
func.func @pool_init(%x: tensor<2x5x6x3xf32>, %d: tensor<f64>) {
  %0 = hlo.reduce_window(%x init : %d) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<f64>) -> tensor<2x2x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op the body must be one of add, max, min, got mul
func.func @pool_body(%x: tensor<2x5x6x3xf32>, %i: tensor<f32>) {
  %0 = hlo.reduce_window(%x init : %i) applies mul dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.reduce_window' op inferred result type(s) (tensor<2x2x3x3xf32>) do not match the declared (tensor<2x3x3x3xf32>)
func.func @pool_result(%x: tensor<2x5x6x3xf32>, %i: tensor<f32>) {
  %0 = hlo.reduce_window(%x init : %i) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<f32>) -> tensor<2x3x3x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.select_and_scatter' op source float32[2x3x3x3] must have the shape of the windows, [2, 2, 3, 3] (C1)
func.func @scatter_source(%x: tensor<2x5x6x3xf32>, %s: tensor<2x3x3x3xf32>, %i: tensor<f32>) {
  %0 = hlo.select_and_scatter(%x, %s init : %i) select "GE" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<2x3x3x3xf32>, tensor<f32>) -> tensor<2x5x6x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.select_and_scatter' op select must be GE or LE, got 'EQ'
func.func @scatter_select(%x: tensor<2x5x6x3xf32>, %s: tensor<2x3x3x3xf32>, %i: tensor<f32>) {
  %0 = hlo.select_and_scatter(%x, %s init : %i) select "EQ" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<0> : tensor<4x2xi64> : (tensor<2x5x6x3xf32>, tensor<2x3x3x3xf32>, tensor<f32>) -> tensor<2x5x6x3xf32>
  func.return
}

// -----

// CHECK: 'hlo.convolution' op preferred_element_type float16 must be the operands' type bfloat16 or a wider float
func.func @conv_narrowing(%x: tensor<2x5x3xbf16>, %w: tensor<3x3x4xbf16>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f] {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x3xbf16>, tensor<3x3x4xbf16>) -> tensor<2x3x4xf16>
  func.return
}
