// xtpu-opt reads StableHLO's windowed ops (JAX's convolutions and pooling)
// as xtpu's hlo.convolution / reduce_window / select_and_scatter; a reversed
// window reverses the kernel first.
// RUN: xtpu-opt %s --split-input-file | filecheck %s

// CHECK-LABEL: func.func @main(%{{.*}}: tensor<2x5x6x3xf32>, %{{.*}}: tensor<3x3x3x4xf32>) -> (tensor<2x3x3x4xf32>, tensor<2x3x3x4xf32>)
// CHECK:         %[[C:.*]] = hlo.convolution(%{{.*}}, %{{.*}}) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 1], pad = {{\[\[}}1, 1], [0, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = "HIGHEST, HIGHEST"} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32>
// CHECK:         %[[M:.*]] = hlo.reduce_window(%[[C]] init : %{{.*}}) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<{{\[\[}}0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x3x3x4xf32>, tensor<f32>) -> tensor<2x2x2x4xf32>
// CHECK:         hlo.select_and_scatter(%[[C]], %[[M]] init : %{{.*}}) select "GE" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<{{\[\[}}0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64>
// CHECK:         hlo.reduce_window(%[[C]] init : %{{.*}}) applies add dims = [1, 3, 3, 1]
module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>) -> (tensor<2x3x3x4xf32>, tensor<2x3x3x4xf32>) {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 1], pad = [[1, 1], [0, 1]], rhs_dilate = [1, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %1 = "stablehlo.reduce_window"(%0, %ninf) <{padding = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<2x3x3x4xf32>, tensor<f32>) -> tensor<2x2x2x4xf32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = "stablehlo.select_and_scatter"(%0, %1, %zero) <{padding = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<2x3x3x4xf32>, tensor<2x2x2x4xf32>, tensor<f32>) -> tensor<2x3x3x4xf32>
    %3 = "stablehlo.reduce_window"(%0, %zero) <{padding = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 3, 3, 1>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<2x3x3x4xf32>, tensor<f32>) -> tensor<2x3x3x4xf32>
    return %2, %3 : tensor<2x3x3x4xf32>, tensor<2x3x3x4xf32>
  }
}

// -----

// window_reversal: the kernel reversed along the flagged spatial dimension.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<1x4x5x2xf32>, %{{.*}}: tensor<2x3x2x3xf32>) -> tensor<1x3x3x3xf32>
// CHECK:         %[[R:.*]] = hlo.reverse %{{.*}}, dims = [0] : tensor<2x3x2x3xf32>
// CHECK-NEXT:    hlo.convolution(%{{.*}}, %[[R]]) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]
module {
  func.func public @main(%x: tensor<1x4x5x2xf32>, %w: tensor<2x3x2x3xf32>) -> tensor<1x3x3x3xf32> {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {reverse = [true, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x5x2xf32>, tensor<2x3x2x3xf32>) -> tensor<1x3x3x3xf32>
    return %0 : tensor<1x3x3x3xf32>
  }
}
