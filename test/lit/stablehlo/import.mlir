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

// -----

// JAX's argmax (a reduce of values and an iota whose body keeps the larger
// value, NaN first, the lower index on ties) is hlo.variadic_reduce argmax.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<2x5xf32>) -> tensor<2xi32>
// CHECK:         %[[IOTA:.*]] = hlo.iota dim = 1 : tensor<2x5xi32>
// CHECK:         %{{.*}}, %[[I:.*]] = hlo.variadic_reduce(%{{.*}} init : %{{.*}}), (%[[IOTA]] init : %{{.*}}) applies argmax across dimensions = [1] : (tensor<2x5xf32>, tensor<2x5xi32>, tensor<f32>, tensor<i32>) -> (tensor<2xf32>, tensor<2xi32>)
// CHECK-NEXT:    func.return %[[I]] : tensor<2xi32>
module @jit_argmax {
  func.func public @main(%arg0: tensor<2x5xf32>) -> tensor<2xi32> {
    %0 = stablehlo.iota dim = 1 : tensor<2x5xi32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %1:2 = stablehlo.reduce(%arg0 init: %cst), (%0 init: %c) across dimensions = [1] : (tensor<2x5xf32>, tensor<2x5xi32>, tensor<f32>, tensor<i32>) -> (tensor<2xf32>, tensor<2xi32>)
     reducer(%arg1: tensor<f32>, %arg3: tensor<f32>) (%arg2: tensor<i32>, %arg4: tensor<i32>)  {
      %2 = stablehlo.compare GT, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %3 = stablehlo.compare NE, %arg1, %arg1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %4 = stablehlo.or %2, %3 : tensor<i1>
      %5 = stablehlo.compare EQ, %arg1, %arg3, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %6 = stablehlo.compare LT, %arg2, %arg4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %7 = stablehlo.and %5, %6 : tensor<i1>
      %8 = stablehlo.or %4, %7 : tensor<i1>
      %9 = stablehlo.select %4, %arg1, %arg3 : tensor<i1>, tensor<f32>
      %10 = stablehlo.select %8, %arg2, %arg4 : tensor<i1>, tensor<i32>
      stablehlo.return %9, %10 : tensor<f32>, tensor<i32>
    }
    return %1#1 : tensor<2xi32>
  }
}

// -----

// JAX's argsort: a comparator that canonicalizes each key (-0.0 to 0.0,
// NaN to one NaN) then compares TOTALORDER LT is xtpu's ascending order.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<2x5xf32>) -> tensor<2x5xi32>
// CHECK:         %{{.*}}, %[[P:.*]] = hlo.sort %{{.*}}, %{{.*}} dim = 1 directions = [LT] stable : (tensor<2x5xf32>, tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>)
// CHECK-NEXT:    func.return %[[P]]
module @jit_argsort {
  func.func public @main(%arg0: tensor<2x5xf32>) -> tensor<2x5xi32> {
    %0 = stablehlo.iota dim = 1 : tensor<2x5xi32>
    %1:2 = "stablehlo.sort"(%arg0, %0) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>, %arg3: tensor<i32>, %arg4: tensor<i32>):
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %2 = stablehlo.compare EQ, %arg1, %cst, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %3 = stablehlo.select %2, %cst, %arg1 : tensor<i1>, tensor<f32>
      %4 = stablehlo.compare NE, %arg1, %arg1, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %cst_1 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
      %5 = stablehlo.select %4, %cst_1, %3 : tensor<i1>, tensor<f32>
      %6 = stablehlo.compare EQ, %arg2, %cst, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %7 = stablehlo.select %6, %cst, %arg2 : tensor<i1>, tensor<f32>
      %8 = stablehlo.compare NE, %arg2, %arg2, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %9 = stablehlo.select %8, %cst_1, %7 : tensor<i1>, tensor<f32>
      %10 = stablehlo.compare LT, %5, %9, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %10 : tensor<i1>
    }) : (tensor<2x5xf32>, tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>)
    return %1#1 : tensor<2x5xi32>
  }
}

// -----

// A comparator whose key is the second operand (b < a: descending): the
// keys go first into xtpu's sort, the results come back in their places.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<4xf32>, %{{.*}}: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>)
// CHECK-NEXT:    %[[SK:.*]], %[[SV:.*]] = hlo.sort %{{.*}}, %{{.*}} dim = 0 directions = [GT] stable : (tensor<4xi32>, tensor<4xf32>) -> (tensor<4xi32>, tensor<4xf32>)
// CHECK-NEXT:    func.return %[[SV]], %[[SK]] : tensor<4xf32>, tensor<4xi32>
module @sort_by_second {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
    %0:2 = "stablehlo.sort"(%arg0, %arg1) <{dimension = 0 : i64, is_stable = false}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
      %1 = stablehlo.compare LT, %d, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }) : (tensor<4xf32>, tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>)
    return %0#0, %0#1 : tensor<4xf32>, tensor<4xi32>
  }
}

// -----

// gather and scatter keep StableHLO's dimension numbers; a scatter region
// of one add is scatter add, one returning the update is replace.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<5x2xf32>, %{{.*}}: tensor<3x1xi32>, %{{.*}}: tensor<3x2xf32>) -> (tensor<3x2xf32>, tensor<5x2xf32>, tensor<5x2xf32>)
// CHECK-NEXT:    %[[G:.*]] = hlo.gather %[[X:.*]][%[[I:.*]]] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 2] : (tensor<5x2xf32>, tensor<3x1xi32>) -> tensor<3x2xf32>
// CHECK-NEXT:    %[[A:.*]] = hlo.scatter %[[X]][%[[I]]], %[[U:.*]] applies add update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<5x2xf32>, tensor<3x1xi32>, tensor<3x2xf32>) -> tensor<5x2xf32>
// CHECK-NEXT:    %[[R:.*]] = hlo.scatter %[[X]][%[[I]]], %[[U]] applies replace
// CHECK-NEXT:    func.return %[[G]], %[[A]], %[[R]]
module @jit_indexing {
  func.func public @main(%x: tensor<5x2xf32>, %i: tensor<3x1xi32>, %u: tensor<3x2xf32>) -> (tensor<3x2xf32>, tensor<5x2xf32>, tensor<5x2xf32>) {
    %g = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 2>}> : (tensor<5x2xf32>, tensor<3x1xi32>) -> tensor<3x2xf32>
    %a = "stablehlo.scatter"(%x, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %s = stablehlo.add %p, %q : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<5x2xf32>, tensor<3x1xi32>, tensor<3x2xf32>) -> tensor<5x2xf32>
    %r = "stablehlo.scatter"(%x, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      stablehlo.return %q : tensor<f32>
    }) : (tensor<5x2xf32>, tensor<3x1xi32>, tensor<3x2xf32>) -> tensor<5x2xf32>
    return %g, %a, %r : tensor<3x2xf32>, tensor<5x2xf32>, tensor<5x2xf32>
  }
}

// -----

// chlo.top_k (JAX's lax.top_k): a stable descending sort by the floats'
// totalOrder key (bits as an integer, the magnitude flipped where the sign
// is set: XLA's order, NaN first), with an iota, then the first k.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x2xi32>)
// CHECK-NEXT:    %[[IOTA:.*]] = hlo.iota dim = 1 : tensor<2x5xi32>
// CHECK-NEXT:    %[[BITS:.*]] = hlo.bitcast_convert %[[X:.*]] : (tensor<2x5xf32>) -> tensor<2x5xi32>
// CHECK:         %[[SIGN:.*]] = hlo.shift_right_arithmetic %[[BITS]], %{{.*}} : tensor<2x5xi32>
// CHECK:         %[[MASK:.*]] = hlo.and %[[SIGN]], %{{.*}} : tensor<2x5xi32>
// CHECK-NEXT:    %[[KEY:.*]] = hlo.xor %[[BITS]], %[[MASK]] : tensor<2x5xi32>
// CHECK-NEXT:    %{{.*}}, %[[V:.*]], %[[I:.*]] = hlo.sort %[[KEY]], %[[X]], %[[IOTA]] dim = 1 directions = [GT] stable
// CHECK-NEXT:    %[[TV:.*]] = hlo.slice %[[V]], start = [0, 0], limit = [2, 2], strides = [1, 1]
// CHECK-NEXT:    %[[TI:.*]] = hlo.slice %[[I]], start = [0, 0], limit = [2, 2], strides = [1, 1]
// CHECK-NEXT:    func.return %[[TV]], %[[TI]]
module @jit_top_k {
  func.func public @main(%arg0: tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x2xi32>) {
    %values, %indices = chlo.top_k(%arg0, k = 2) : tensor<2x5xf32> -> (tensor<2x2xf32>, tensor<2x2xi32>)
    return %values, %indices : tensor<2x2xf32>, tensor<2x2xi32>
  }
}

// -----

// A TOTALORDER compare of floats compares their totalOrder keys (exact);
// round_nearest_afz is floor(|x|) + (|x| - floor(|x|) >= 0.5), signed.
// CHECK-LABEL: func.func @main(%{{.*}}: tensor<3xf32>, %{{.*}}: tensor<3xf32>) -> (tensor<3xi1>, tensor<3xf32>)
// CHECK:         %[[KA:.*]] = hlo.xor
// CHECK:         %[[KB:.*]] = hlo.xor
// CHECK-NEXT:    %[[LT:.*]] = hlo.compare LT, %[[KA]], %[[KB]] : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi1>
// CHECK:         hlo.floor
// CHECK:         hlo.compare GE
// CHECK:         hlo.sign
// CHECK-NEXT:    %[[R:.*]] = hlo.multiply
// CHECK-NEXT:    func.return %[[LT]], %[[R]]
module @total_order {
  func.func public @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> (tensor<3xi1>, tensor<3xf32>) {
    %0 = stablehlo.compare LT, %a, %b, TOTALORDER : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
    %1 = stablehlo.round_nearest_afz %a : tensor<3xf32>
    return %0, %1 : tensor<3xi1>, tensor<3xf32>
  }
}
