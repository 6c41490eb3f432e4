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


// -----

// scatter: #stablehlo.scatter<...> from the op's dimension numbers (empty
// ones left out); replace is a region returning the update.
// CHECK-LABEL: sym_name = "scatter_replace"
// CHECK:         "stablehlo.scatter"(%{{.*}}, %{{.*}}, %{{.*}}) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false}> ({
// CHECK-NEXT:    ^bb{{.*}}(%{{.*}}: tensor<f32>, %[[U:.*]]: tensor<f32>):
// CHECK-NEXT:      "stablehlo.return"(%[[U]]) : (tensor<f32>) -> ()
// CHECK-NEXT:    }) : (tensor<5x2xf32>, tensor<3x1xi32>, tensor<3x2xf32>) -> tensor<5x2xf32>
func.func @scatter_replace(%x: tensor<5x2xf32>, %i: tensor<3x1xi32>, %u: tensor<3x2xf32>) -> tensor<5x2xf32> {
  %r = hlo.scatter %x[%i], %u applies replace update_window_dims = [1], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<5x2xf32>, tensor<3x1xi32>, tensor<3x2xf32>) -> tensor<5x2xf32>
  func.return %r : tensor<5x2xf32>
}

// -----

// scatter max on booleans: or.
// CHECK-LABEL: sym_name = "scatter_bool_max"
// CHECK:         "stablehlo.scatter"
// CHECK-NEXT:    ^bb{{.*}}(%[[A:.*]]: tensor<i1>, %[[B:.*]]: tensor<i1>):
// CHECK-NEXT:      %[[O:.*]] = "stablehlo.or"(%[[A]], %[[B]])
// CHECK-NEXT:      "stablehlo.return"(%[[O]])
func.func @scatter_bool_max(%x: tensor<5xi1>, %i: tensor<3x1xi32>, %u: tensor<3xi1>) -> tensor<5xi1> {
  %r = hlo.scatter %x[%i], %u applies max update_window_dims = [], inserted_window_dims = [0], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0], index_vector_dim = 1 : (tensor<5xi1>, tensor<3x1xi32>, tensor<3xi1>) -> tensor<5xi1>
  func.return %r : tensor<5xi1>
}

// -----

// sort: the comparator of xtpu's keys, NaN last (numpy's order); a
// payload operand moves with the key; always stable.
// CHECK-LABEL: sym_name = "sort_descending"
// CHECK:         "stablehlo.sort"(%{{.*}}, %{{.*}}) <{dimension = 1 : i64, is_stable = true}> ({
// CHECK-NEXT:    ^bb{{.*}}(%[[A:.*]]: tensor<f32>, %[[B:.*]]: tensor<f32>, %{{.*}}: tensor<i32>, %{{.*}}: tensor<i32>):
// CHECK-NEXT:      %[[GT:.*]] = "stablehlo.compare"(%[[A]], %[[B]]) <{comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>}>
// CHECK-NEXT:      %[[NA:.*]] = "stablehlo.compare"(%[[A]], %[[A]]) <{comparison_direction = #stablehlo<comparison_direction NE>
// CHECK-NEXT:      %[[NB:.*]] = "stablehlo.compare"(%[[B]], %[[B]]) <{comparison_direction = #stablehlo<comparison_direction NE>
// CHECK-NEXT:      %[[N:.*]] = "stablehlo.not"(%[[NA]])
// CHECK-NEXT:      %[[L:.*]] = "stablehlo.and"(%[[N]], %[[NB]])
// CHECK-NEXT:      %[[R:.*]] = "stablehlo.or"(%[[GT]], %[[L]])
// CHECK-NEXT:      "stablehlo.return"(%[[R]]) : (tensor<i1>) -> ()
func.func @sort_descending(%k: tensor<2x5xf32>, %v: tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>) {
  %s:2 = hlo.sort %k, %v dim = 1 directions = [GT] stable : (tensor<2x5xf32>, tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>)
  func.return %s#0, %s#1 : tensor<2x5xf32>, tensor<2x5xi32>
}

// -----

// Two integer keys: lexicographic, LT then GT.
// CHECK-LABEL: sym_name = "sort_two_keys"
// CHECK:         ^bb{{.*}}(%[[A0:.*]]: tensor<i32>, %[[B0:.*]]: tensor<i32>, %[[A1:.*]]: tensor<i32>, %[[B1:.*]]: tensor<i32>):
// CHECK-NEXT:      %[[GT1:.*]] = "stablehlo.compare"(%[[A1]], %[[B1]]) <{comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type SIGNED>}>
// CHECK-NEXT:      %[[LT0:.*]] = "stablehlo.compare"(%[[A0]], %[[B0]]) <{comparison_direction = #stablehlo<comparison_direction LT>
// CHECK-NEXT:      %[[EQ0:.*]] = "stablehlo.compare"(%[[A0]], %[[B0]]) <{comparison_direction = #stablehlo<comparison_direction EQ>
// CHECK-NEXT:      %[[T:.*]] = "stablehlo.and"(%[[EQ0]], %[[GT1]])
// CHECK-NEXT:      %[[R:.*]] = "stablehlo.or"(%[[LT0]], %[[T]])
// CHECK-NEXT:      "stablehlo.return"(%[[R]])
func.func @sort_two_keys(%a: tensor<6xi32>, %b: tensor<6xi32>) -> (tensor<6xi32>, tensor<6xi32>) {
  %s:2 = hlo.sort %a, %b dim = 0 directions = [LT, GT] stable : (tensor<6xi32>, tensor<6xi32>) -> (tensor<6xi32>, tensor<6xi32>)
  func.return %s#0, %s#1 : tensor<6xi32>, tensor<6xi32>
}

// -----

// variadic_reduce (argmax): StableHLO's reduce of (values, indices) whose
// body keeps the larger value, the lower index on ties.
// CHECK-LABEL: sym_name = "argmax"
// CHECK:         "stablehlo.reduce"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{dimensions = array<i64: 1>}> ({
// CHECK-NEXT:    ^bb{{.*}}(%[[A:.*]]: tensor<i32>, %[[IA:.*]]: tensor<i64>, %[[B:.*]]: tensor<i32>, %[[IB:.*]]: tensor<i64>):
// CHECK-NEXT:      %[[GT:.*]] = "stablehlo.compare"(%[[A]], %[[B]]) <{comparison_direction = #stablehlo<comparison_direction GT>
// CHECK-NEXT:      %[[EQ:.*]] = "stablehlo.compare"(%[[A]], %[[B]]) <{comparison_direction = #stablehlo<comparison_direction EQ>
// CHECK-NEXT:      %[[LO:.*]] = "stablehlo.compare"(%[[IA]], %[[IB]]) <{comparison_direction = #stablehlo<comparison_direction LT>
// CHECK-NEXT:      %[[T:.*]] = "stablehlo.and"(%[[EQ]], %[[LO]])
// CHECK-NEXT:      %[[P:.*]] = "stablehlo.or"(%[[GT]], %[[T]])
// CHECK-NEXT:      %[[V:.*]] = "stablehlo.select"(%[[P]], %[[A]], %[[B]])
// CHECK-NEXT:      %[[I:.*]] = "stablehlo.select"(%[[P]], %[[IA]], %[[IB]])
// CHECK-NEXT:      "stablehlo.return"(%[[V]], %[[I]]) : (tensor<i32>, tensor<i64>) -> ()
// CHECK-NEXT:    }) : (tensor<2x5xi32>, tensor<2x5xi64>, tensor<i32>, tensor<i64>) -> (tensor<2xi32>, tensor<2xi64>)
func.func @argmax(%x: tensor<2x5xi32>, %i: tensor<2x5xi64>, %v0: tensor<i32>, %i0: tensor<i64>) -> tensor<2xi64> {
  %v, %j = hlo.variadic_reduce(%x init : %v0), (%i init : %i0) applies argmax across dimensions = [1] : (tensor<2x5xi32>, tensor<2x5xi64>, tensor<i32>, tensor<i64>) -> (tensor<2xi32>, tensor<2xi64>)
  func.return %j : tensor<2xi64>
}

// -----

// erf has no StableHLO op: Cephes's erf in float64 ops, converted back.
// CHECK-LABEL: sym_name = "erf"
// CHECK:         "stablehlo.convert"(%{{.*}}) : (tensor<3xf32>) -> tensor<3xf64>
// CHECK:         "stablehlo.exponential"
// CHECK:         "stablehlo.select"
// CHECK-NEXT:    "stablehlo.convert"(%{{.*}}) : (tensor<3xf64>) -> tensor<3xf32>
// CHECK-NOT:     erf
func.func @erf(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = hlo.erf %x : tensor<3xf32>
  func.return %y : tensor<3xf32>
}

// -----

// Infeed: one stablehlo.infeed of the tuple on the token chain (TF's
// bridge's form), infeed_config naming the queue.
// CHECK-LABEL: sym_name = "infeed"
// CHECK:         %[[T:.*]] = "stablehlo.after_all"() : () -> !stablehlo.token
// CHECK-NEXT:    %{{.*}}, %{{.*}}, %{{.*}} = "stablehlo.infeed"(%[[T]]) <{infeed_config = "q"}> : (!stablehlo.token) -> (tensor<2xf32>, tensor<i32>, !stablehlo.token)
func.func @infeed() -> (tensor<2xf32>, tensor<i32>) {
  %a, %b = tpu.infeed_dequeue_tuple "q" : tensor<2xf32>, tensor<i32>
  func.return %a, %b : tensor<2xf32>, tensor<i32>
}
