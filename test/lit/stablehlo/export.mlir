// xtpu-opt -t stablehlo: the device program as StableHLO (generic form),
// @main with one replica's arguments and results, mhlo.num_replicas.
// RUN: xtpu-opt %s --split-input-file -t stablehlo | filecheck %s

// CHECK-LABEL: "func.func"() <{sym_name = "main", function_type = (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>}>
// CHECK:         "stablehlo.dot_general"(%{{.*}}, %{{.*}}) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]}>
// CHECK:         "stablehlo.all_reduce"(%{{.*}}) <{replica_groups = dense<{{\[\[}}0, 1]]> : tensor<1x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>}> ({
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>):
// CHECK-NEXT:      "stablehlo.add"
// CHECK-NEXT:      "stablehlo.return"
// CHECK:         "stablehlo.tanh"
// CHECK:       {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32}
func.func @main(%x0: tensor<2x3xf32>, %x1: tensor<2x3xf32>, %w0: tensor<3x4xf32>, %w1: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %r:2 = tpu.replicate([%x0, %x1] as %x: tensor<2x3xf32>, [%w0, %w1] as %w: tensor<3x4xf32>) {n = 2 : i64} {
    %d = hlo.dot_general %x, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %s = ccl.all_reduce %d applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> channel 3 : tensor<2x4xf32>
    %t = hlo.tanh %s : tensor<2x4xf32>
    tpu.yield %t : tensor<2x4xf32>
  }
  func.return %r#0, %r#1 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// xtpu's ids are int32, StableHLO's ui32: a convert follows.
// CHECK-LABEL: sym_name = "replica_id"
// CHECK:         %[[R:.*]] = "stablehlo.replica_id"() : () -> tensor<ui32>
// CHECK-NEXT:    "stablehlo.convert"(%[[R]]) : (tensor<ui32>) -> tensor<i32>
func.func @replica_id() -> tensor<i32> {
  %r = tpu.replica_id : tensor<i32>
  func.return %r : tensor<i32>
}

// -----

// A loop's captured values become loop values the body passes on.
// CHECK-LABEL: sym_name = "loop_with_capture"
// CHECK:         "stablehlo.while"(%{{.*}}, %[[C:.*]]) ({
// CHECK-NEXT:    ^bb{{.*}}(%{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>):
// CHECK:         }, {
// CHECK-NEXT:    ^bb{{.*}}(%[[V:.*]]: tensor<f32>, %[[K:.*]]: tensor<f32>):
// CHECK-NEXT:      %[[N:.*]] = "stablehlo.add"(%[[V]], %[[K]])
// CHECK-NEXT:      "stablehlo.return"(%[[N]], %[[K]]) : (tensor<f32>, tensor<f32>) -> ()
// CHECK-NEXT:    }) : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
func.func @loop_with_capture(%x: tensor<f32>, %k: tensor<f32>) -> tensor<f32> {
  %r = "hlo.while"(%x) ({
  ^bb0(%v: tensor<f32>):
    %lim = hlo.constant dense<1.000000e+01> : tensor<f32>
    %c = hlo.compare LT, %v, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
    hlo.return %c : tensor<i1>
  }, {
  ^bb0(%v: tensor<f32>):
    %n = hlo.add %v, %k : tensor<f32>
    hlo.return %n : tensor<f32>
  }) : (tensor<f32>) -> tensor<f32>
  func.return %r : tensor<f32>
}

// -----

// Float to int: where StableHLO leaves the result to the implementation
// (NaN, out of range), xtpu's INT_MIN is written out.
// CHECK-LABEL: sym_name = "float_to_int"
// CHECK:         %[[Y:.*]] = "stablehlo.convert"(%[[X:.*]]) : (tensor<4xf32>) -> tensor<4xi32>
// CHECK:         "stablehlo.compare"(%[[X]], %{{.*}}) <{comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>}>
// CHECK:         "stablehlo.compare"(%[[X]], %{{.*}}) <{comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type FLOAT>}>
// CHECK:         "stablehlo.constant"() <{value = dense<-2147483648> : tensor<i32>}>
// CHECK:         "stablehlo.select"(%{{.*}}, %[[Y]], %{{.*}})
func.func @float_to_int(%x: tensor<4xf32>) -> tensor<4xi32> {
  %y = hlo.convert %x : (tensor<4xf32>) -> tensor<4xi32>
  func.return %y : tensor<4xi32>
}

