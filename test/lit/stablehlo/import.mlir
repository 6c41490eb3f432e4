// xtpu-opt reads StableHLO (custom or generic form): @main's ops become
// xtpu's; with mhlo.num_replicas = 2, inside a tpu.replicate of 2 replicas
// taking every replica's inputs ([input][replica], xtpu.lower's form).
// RUN: xtpu-opt %s --split-input-file | filecheck %s

// CHECK-LABEL: func.func @main(%{{.*}}: tensor<2x3xf32>, %{{.*}}: tensor<2x3xf32>, %{{.*}}: tensor<3xf32>, %{{.*}}: tensor<3xf32>) -> (tensor<2xf32>, tensor<2xf32>)
// CHECK:         tpu.replicate([%{{.*}}, %{{.*}}] as %[[X:.*]]: tensor<2x3xf32>, [%{{.*}}, %{{.*}}] as %[[B:.*]]: tensor<3xf32>) {n = 2 : i64} {
// CHECK:           %[[BB:.*]] = hlo.broadcast_in_dim %[[B]], dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:      %[[S:.*]] = hlo.add %[[X]], %[[BB]] : tensor<2x3xf32>
// CHECK-NEXT:      %[[R:.*]] = ccl.all_reduce %[[S]] applies add groups = dense<{{\[\[}}0, 1]]> : tensor<1x2xi64> channel 1 : tensor<2x3xf32>
// CHECK-NEXT:      %[[Z:.*]] = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:      %[[M:.*]] = hlo.reduce(%[[R]] init : %[[Z]]) applies max across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT:      tpu.yield %[[M]] : tensor<2xf32>
module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> tensor<2xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<2x3xf32>
    %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    return %3 : tensor<2xf32>
  }
}

// -----

// Functions @main calls are inlined; a loop keeps its regions; ops xtpu has
// no op for are compositions (rsqrt: 1 / sqrt).
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<4xf32>) -> tensor<4xf32>
// CHECK:         hlo.while(%[[I:.*]] = %{{.*}}, %[[V:.*]] = %{{.*}}) : tensor<i32>, tensor<4xf32> cond {
// CHECK:           hlo.compare LT, %[[I]], %{{.*}} : (tensor<i32>, tensor<i32>) -> tensor<i1>
// CHECK:         } do {
// CHECK:           %[[Q:.*]] = hlo.sqrt %{{.*}} : tensor<4xf32>
// CHECK-NEXT:      %[[ONE:.*]] = hlo.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:      %[[ONES:.*]] = hlo.broadcast_in_dim %[[ONE]], dims = [] : (tensor<f32>) -> tensor<4xf32>
// CHECK-NEXT:      hlo.divide %[[ONES]], %[[Q]] : tensor<4xf32>
// CHECK-NOT:     func.call
module @jit_g {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.while(%i = %c, %v = %arg0) : tensor<i32>, tensor<4xf32>
    cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %n = func.call @step(%v) : (tensor<4xf32>) -> tensor<4xf32>
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %j, %n : tensor<i32>, tensor<4xf32>
    }
    return %0#1 : tensor<4xf32>
  }
  func.func private @step(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = stablehlo.rsqrt %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
