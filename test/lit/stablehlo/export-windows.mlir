// xtpu-opt -t stablehlo on the windowed ops (dialects/hlo_window.py): the
// convolution's dimension numbers in StableHLO's compact form, its window
// attributes under their own names, precision HIGHEST (xtpu multiplies
// exactly); reduce_window's and select_and_scatter's bodies as regions.
// RUN: xtpu-opt %s -t stablehlo | filecheck %s

// CHECK-LABEL: sym_name = "conv_pool"
// CHECK:         %[[C:.*]] = "stablehlo.convolution"(%{{.*}}, %{{.*}}) <{window_strides = array<i64: 2, 2>, padding = dense<{{\[\[}}1, 1], [0, 1]]> : tensor<2x2xi64>, lhs_dilation = array<i64: 1, 1>, rhs_dilation = array<i64: 1, 1>, dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>, feature_group_count = 1 : i64, batch_group_count = 1 : i64, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]}> : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32>
// CHECK-NEXT:    %[[M:.*]] = "stablehlo.reduce_window"(%[[C]], %{{.*}}) <{window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>, base_dilations = array<i64: 1, 1, 1, 1>, window_dilations = array<i64: 1, 1, 1, 1>, padding = dense<{{\[\[}}0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64>}> ({
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<f32>, %[[B:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[MAX:.*]] = "stablehlo.maximum"(%[[A]], %[[B]]) : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT:      "stablehlo.return"(%[[MAX]]) : (tensor<f32>) -> ()
// CHECK-NEXT:    }) : (tensor<2x3x3x4xf32>, tensor<f32>) -> tensor<2x2x2x4xf32>
// CHECK-NEXT:    "stablehlo.select_and_scatter"(%[[C]], %[[M]], %{{.*}}) <{window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>, padding = dense<{{\[\[}}0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64>}> ({
// CHECK-NEXT:    ^bb0(%[[P:.*]]: tensor<f32>, %[[Q:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[GE:.*]] = "stablehlo.compare"(%[[P]], %[[Q]]) <{comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type FLOAT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT:      "stablehlo.return"(%[[GE]]) : (tensor<i1>) -> ()
// CHECK-NEXT:    }, {
// CHECK-NEXT:    ^bb0(%[[U:.*]]: tensor<f32>, %[[V:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[ADD:.*]] = "stablehlo.add"(%[[U]], %[[V]]) : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT:      "stablehlo.return"(%[[ADD]]) : (tensor<f32>) -> ()
// CHECK-NEXT:    }) : (tensor<2x3x3x4xf32>, tensor<2x2x2x4xf32>, tensor<f32>) -> tensor<2x3x3x4xf32>
func.func @conv_pool(%x: tensor<2x5x6x3xf32>, %w: tensor<3x3x3x4xf32>, %ninf: tensor<f32>, %zero: tensor<f32>) -> (tensor<2x2x2x4xf32>, tensor<2x3x3x4xf32>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[1, 1], [0, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x5x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<2x3x3x4xf32>
  %1 = hlo.reduce_window(%0 init : %ninf) applies max dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], base_dilations = [1, 1, 1, 1], window_dilations = [1, 1, 1, 1], pad = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x3x3x4xf32>, tensor<f32>) -> tensor<2x2x2x4xf32>
  %2 = hlo.select_and_scatter(%0, %1 init : %zero) select "GE" dims = [1, 2, 2, 1], strides = [1, 2, 2, 1], pad = dense<[[0, 0], [0, 1], [0, 1], [0, 0]]> : tensor<4x2xi64> : (tensor<2x3x3x4xf32>, tensor<2x2x2x4xf32>, tensor<f32>) -> tensor<2x3x3x4xf32>
  func.return %1, %2 : tensor<2x2x2x4xf32>, tensor<2x3x3x4xf32>
}

// -----

// A kernel gradient's form: batch groups, lhs dilation, negative padding,
// permuted dimension numbers; a windowed sum with dilations.
// CHECK-LABEL: sym_name = "grouped"
// CHECK:         "stablehlo.convolution"(%{{.*}}, %{{.*}}) <{window_strides = array<i64: 1>, padding = dense<{{\[\[}}2, -1]]> : tensor<1x2xi64>, lhs_dilation = array<i64: 2>, rhs_dilation = array<i64: 1>, dimension_numbers = #stablehlo.conv<[f, 0, b]x[i, 0, o]->[b, 0, f]>, feature_group_count = 1 : i64, batch_group_count = 2 : i64, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]}> : (tensor<3x4x6xf32>, tensor<3x2x4xf32>) -> tensor<3x7x4xf32>
// CHECK:         "stablehlo.reduce_window"(%{{.*}}, %{{.*}}) <{window_dimensions = array<i64: 3, 2>, window_strides = array<i64: 2, 1>, base_dilations = array<i64: 2, 1>, window_dilations = array<i64: 1, 2>, padding = dense<{{\[\[}}1, 0], [0, 0]]> : tensor<2x2xi64>}> ({
// CHECK:           "stablehlo.add"
func.func @grouped(%x: tensor<3x4x6xf32>, %w: tensor<3x2x4xf32>, %y: tensor<6x7xf64>, %i: tensor<f64>) -> (tensor<3x7x4xf32>, tensor<5x5xf64>) {
  %0 = hlo.convolution(%x, %w) dim_numbers = [f, 0, b]x[i, 0, o]->[b, 0, f], window = {stride = [1], pad = [[2, -1]], lhs_dilate = [2], rhs_dilate = [1]} {batch_group_count = 2 : i64, feature_group_count = 1 : i64} : (tensor<3x4x6xf32>, tensor<3x2x4xf32>) -> tensor<3x7x4xf32>
  %1 = hlo.reduce_window(%y init : %i) applies add dims = [3, 2], strides = [2, 1], base_dilations = [2, 1], window_dilations = [1, 2], pad = dense<[[1, 0], [0, 0]]> : tensor<2x2xi64> : (tensor<6x7xf64>, tensor<f64>) -> tensor<5x5xf64>
  func.return %0, %1 : tensor<3x7x4xf32>, tensor<5x5xf64>
}
