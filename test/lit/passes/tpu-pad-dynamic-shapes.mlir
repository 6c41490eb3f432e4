// tpu-pad-dynamic-shapes: values padded by replicate's maximum_shapes carry
// their real sizes (hlo.set_dimension_size, StableHLO's get_dimension_size);
// the pass (XLA's dynamic padder) rewrites every op whose result the padding
// would change, and names the op it cannot make exact.
// RUN: xtpu-opt %s --split-input-file --verify-diagnostics -p tpu-pad-dynamic-shapes | filecheck %s

// A reduction over a padded dimension sees init_value in the padding:
// select(iota < real size, x, init) (sum, max, min, argmax, softmax, mean).
// CHECK-LABEL: func @reduce_masks_padding
// CHECK:         %init = hlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT:    %[[I:.*]] = hlo.iota dim = 0 : tensor<8x3xi32>
// CHECK-NEXT:    %[[N:.*]] = hlo.broadcast_in_dim %n, dims = [] : (tensor<i32>) -> tensor<8x3xi32>
// CHECK-NEXT:    %[[M:.*]] = hlo.compare LT, %[[I]], %[[N]]
// CHECK-NEXT:    %[[F:.*]] = hlo.broadcast_in_dim %init, dims = []
// CHECK-NEXT:    %[[X:.*]] = hlo.select %[[M]], %x, %[[F]]
// CHECK-NEXT:    %m = hlo.reduce(%[[X]] init : %init) applies max across dimensions = [0]
// CHECK-NOT:     hlo.set_dimension_size
func.func @reduce_masks_padding(%a: tensor<8x3xf32>, %b: tensor<8x3xf32>, %na: tensor<i32>, %nb: tensor<i32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<8x3xf32>, [%na, %nb] as %n: tensor<i32>) {n = 2 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8x3xf32>, tensor<i32>) -> tensor<8x3xf32>
    %init = hlo.constant dense<0xFF800000> : tensor<f32>
    %m = hlo.reduce(%p init : %init) applies max across dimensions = [0] : (tensor<8x3xf32>, tensor<f32>) -> tensor<3xf32>
    tpu.yield %m : tensor<3xf32>
  }
  func.return
}

// -----

// get_dimension_size: the real size through elementwise ops, a constant for a
// static dimension; set_dimension_size is gone.
// CHECK-LABEL: func @get_dimension_size_is_the_real_size
// CHECK:         %e = hlo.exponential %x : tensor<8x3xf32>
// CHECK-NEXT:    %s1 = hlo.constant dense<3> : tensor<i32>
// CHECK-NEXT:    tpu.yield %n, %s1 : tensor<i32>, tensor<i32>
func.func @get_dimension_size_is_the_real_size(%a: tensor<8x3xf32>, %b: tensor<8x3xf32>, %na: tensor<i32>, %nb: tensor<i32>) {
  %r:4 = tpu.replicate([%a, %b] as %x: tensor<8x3xf32>, [%na, %nb] as %n: tensor<i32>) {n = 2 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8x3xf32>, tensor<i32>) -> tensor<8x3xf32>
    %e = hlo.exponential %p : tensor<8x3xf32>
    %s0 = hlo.get_dimension_size %e, dim = 0 : (tensor<8x3xf32>) -> tensor<i32>
    %s1 = hlo.get_dimension_size %e, dim = 1 : (tensor<8x3xf32>) -> tensor<i32>
    tpu.yield %s0, %s1 : tensor<i32>, tensor<i32>
  }
  func.return
}

// -----

// A contraction over a padded dimension: zeros in the padding of both
// operands (here one operand, masked once).
// CHECK-LABEL: func @dot_general_contracting_a_padded_dimension
// CHECK:         %[[Z:.*]] = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK:         %[[X:.*]] = hlo.select %{{.*}}, %x, %{{.*}} : (tensor<8x3xi1>, tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT:    %d = hlo.dot_general %[[X]], %[[X]], batching_dims = [] x [], contracting_dims = [0] x [0]
func.func @dot_general_contracting_a_padded_dimension(%a: tensor<8x3xf32>, %b: tensor<8x3xf32>, %na: tensor<i32>, %nb: tensor<i32>) {
  %r:2 = tpu.replicate([%a, %b] as %x: tensor<8x3xf32>, [%na, %nb] as %n: tensor<i32>) {n = 2 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8x3xf32>, tensor<i32>) -> tensor<8x3xf32>
    %d = hlo.dot_general %p, %p, batching_dims = [] x [], contracting_dims = [0] x [0] : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<3x3xf32>
    tpu.yield %d : tensor<3x3xf32>
  }
  func.return
}

// -----

// Concatenating along a padded dimension writes each operand at the running
// real offset (XLA's RewriteDynamicConcat); the real size is the sum.
// CHECK-LABEL: func @concatenate_along_a_padded_dimension
// CHECK:         %[[ACC:.*]] = hlo.broadcast_in_dim %{{.*}}, dims = [] : (tensor<f32>) -> tensor<8x2xf32>
// CHECK-NEXT:    %[[O:.*]] = hlo.constant dense<0> : tensor<i32>
// CHECK-NEXT:    %[[A1:.*]] = hlo.dynamic_update_slice %[[ACC]], %x at [%[[O]], %[[O]]]
// CHECK-NEXT:    %[[O2:.*]] = hlo.add %[[O]], %n : tensor<i32>
// CHECK-NEXT:    %c = hlo.dynamic_update_slice %[[A1]], %x at [%[[O2]], %[[O]]]
// CHECK-NEXT:    %s = hlo.add %[[O2]], %n : tensor<i32>
// CHECK-NEXT:    tpu.yield %c, %s
func.func @concatenate_along_a_padded_dimension(%a: tensor<4x2xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    %c = hlo.concatenate %p, %p dim = 0 : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
    %s = hlo.get_dimension_size %c, dim = 0 : (tensor<8x2xf32>) -> tensor<i32>
    tpu.yield %c, %s : tensor<8x2xf32>, tensor<i32>
  }
  func.return
}

// -----

// Merging a padded dimension with the dimensions after it keeps the real
// elements a prefix: real size n * 2.
// CHECK-LABEL: func @reshape_merging_minor_dimensions_keeps_a_prefix
// CHECK:         %[[TWO:.*]] = hlo.constant dense<2> : tensor<i32>
// CHECK-NEXT:    %s = hlo.multiply %n, %[[TWO]] : tensor<i32>
// CHECK-NEXT:    %f = hlo.reshape %x : (tensor<4x2xf32>) -> tensor<8xf32>
func.func @reshape_merging_minor_dimensions_keeps_a_prefix(%a: tensor<4x2xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    %f = hlo.reshape %p : (tensor<4x2xf32>) -> tensor<8xf32>
    %s = hlo.get_dimension_size %f, dim = 0 : (tensor<8xf32>) -> tensor<i32>
    tpu.yield %f, %s : tensor<8xf32>, tensor<i32>
  }
  func.return
}

// -----

// Merging it with a dimension before it first moves each row's real
// elements together (one dynamic_update_slice per row, XLA's
// RewriteDynamicReshape).
// CHECK-LABEL: func @reshape_merging_major_dimensions_compacts
// CHECK:         %[[R0:.*]] = hlo.slice %x, start = [0, 0], limit = [1, 4]
// CHECK-NEXT:    %[[F0:.*]] = hlo.reshape %[[R0]] : (tensor<1x4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[U0:.*]] = hlo.dynamic_update_slice %{{.*}}, %[[F0]] at [%{{.*}}]
// CHECK-NEXT:    %[[OFF:.*]] = hlo.add %{{.*}}, %n : tensor<i32>
// CHECK-NEXT:    %[[R1:.*]] = hlo.slice %x, start = [1, 0], limit = [2, 4]
// CHECK-NEXT:    %[[F1:.*]] = hlo.reshape %[[R1]]
// CHECK-NEXT:    %[[U1:.*]] = hlo.dynamic_update_slice %[[U0]], %[[F1]] at [%[[OFF]]]
// CHECK:         %[[C:.*]] = hlo.reshape %[[U1]] : (tensor<8xf32>) -> tensor<2x4xf32>
// CHECK:         %s = hlo.multiply %n, %{{.*}} : tensor<i32>
// CHECK-NEXT:    %f = hlo.reshape %[[C]] : (tensor<2x4xf32>) -> tensor<8xf32>
func.func @reshape_merging_major_dimensions_compacts(%a: tensor<2x4xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<2x4xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 1 : (tensor<2x4xf32>, tensor<i32>) -> tensor<2x4xf32>
    %f = hlo.reshape %p : (tensor<2x4xf32>) -> tensor<8xf32>
    %s = hlo.get_dimension_size %f, dim = 0 : (tensor<8xf32>) -> tensor<i32>
    tpu.yield %f, %s : tensor<8xf32>, tensor<i32>
  }
  func.return
}

// -----

// cross_replica_sum: each replica's padding becomes zeros; the real size is
// the largest in the group: the indices some replica reaches, counted with
// a cross_replica_sum of a 0/1 mask.
// CHECK-LABEL: func @cross_replica_sum_of_padded_values
// CHECK:         %[[X:.*]] = hlo.select %{{.*}}, %x, %{{.*}} : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK:         %[[M:.*]] = hlo.convert %{{.*}} : (tensor<4xi1>) -> tensor<4xi32>
// CHECK-NEXT:    %[[CNT:.*]] = tpu.cross_replica_sum %[[M]] : tensor<4xi32>
// CHECK:         %[[HIT:.*]] = hlo.compare GT, %[[CNT]], %{{.*}}
// CHECK-NEXT:    %[[ONE:.*]] = hlo.convert %[[HIT]]
// CHECK:         %s = hlo.reduce(%[[ONE]] init : %{{.*}}) applies add across dimensions = [0]
// CHECK-NEXT:    %c = tpu.cross_replica_sum %[[X]] : tensor<4xf32>
func.func @cross_replica_sum_of_padded_values(%a: tensor<4xf32>, %b: tensor<4xf32>, %na: tensor<i32>, %nb: tensor<i32>) {
  %r:4 = tpu.replicate([%a, %b] as %x: tensor<4xf32>, [%na, %nb] as %n: tensor<i32>) {n = 2 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
    %c = tpu.cross_replica_sum %p : tensor<4xf32>
    %s = hlo.get_dimension_size %c, dim = 0 : (tensor<4xf32>) -> tensor<i32>
    tpu.yield %c, %s : tensor<4xf32>, tensor<i32>
  }
  func.return
}

// -----

// Real sizes follow transpose and broadcast_in_dim; a strided slice's is
// max(0, (min(limit, n) - start + stride - 1) / stride).
// CHECK-LABEL: func @sizes_follow_transpose_broadcast_slice
// CHECK:         %[[MIN:.*]] = hlo.minimum %n, %{{.*}} : tensor<i32>
// CHECK:         %[[SUB:.*]] = hlo.subtract %[[MIN]], %{{.*}} : tensor<i32>
// CHECK:         %[[DIV:.*]] = hlo.divide %[[SUB]], %{{.*}} : tensor<i32>
// CHECK:         %n2 = hlo.maximum %[[DIV]], %{{.*}} : tensor<i32>
// CHECK:         tpu.yield %s, %n, %n2
func.func @sizes_follow_transpose_broadcast_slice(%a: tensor<4x2xf32>, %na: tensor<i32>) {
  %r:3 = tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    %t = hlo.transpose %p, dims = [1, 0] : (tensor<4x2xf32>) -> tensor<2x4xf32>
    %b = hlo.broadcast_in_dim %t, dims = [1, 2] : (tensor<2x4xf32>) -> tensor<3x2x4xf32>
    %s = hlo.slice %b, start = [0, 0, 1], limit = [3, 2, 4], strides = [1, 1, 2] : (tensor<3x2x4xf32>) -> tensor<3x2x2xf32>
    %n1 = hlo.get_dimension_size %b, dim = 2 : (tensor<3x2x4xf32>) -> tensor<i32>
    %n2 = hlo.get_dimension_size %s, dim = 2 : (tensor<3x2x2xf32>) -> tensor<i32>
    tpu.yield %s, %n1, %n2 : tensor<3x2x2xf32>, tensor<i32>, tensor<i32>
  }
  func.return
}

// -----

// hlo.if: a result keeps the real size both branches yield.
// CHECK-LABEL: func @if_results_keep_the_real_size
// CHECK:         tpu.yield %y, %n : tensor<4xf32>, tensor<i32>
func.func @if_results_keep_the_real_size(%a: tensor<4xf32>, %na: tensor<i32>, %c: tensor<i1>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4xf32>, [%na] as %n: tensor<i32>, [%c] as %pred: tensor<i1>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
    %y = "hlo.if"(%pred) ({
      %e = hlo.exponential %p : tensor<4xf32>
      hlo.return %e : tensor<4xf32>
    }, {
      hlo.return %p : tensor<4xf32>
    }) : (tensor<i1>) -> tensor<4xf32>
    %s = hlo.get_dimension_size %y, dim = 0 : (tensor<4xf32>) -> tensor<i32>
    tpu.yield %y, %s : tensor<4xf32>, tensor<i32>
  }
  func.return
}

// -----

// CHECK: 'hlo.while' op carries loop value 0 padded along dimension(s) [0] (a dynamic size: replicate's maximum_shapes or where(condition)), but its body yields it with no real sizes; tpu-pad-dynamic-shapes needs a loop to keep each padded value's real size
func.func @while_body_loses_the_real_size(%a: tensor<4xf32>, %na: tensor<i32>) {
  %r = tpu.replicate([%a] as %x: tensor<4xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
        %w = "hlo.while"(%p) ({
    ^bb0(%c: tensor<4xf32>):
      %t = hlo.constant dense<false> : tensor<i1>
      hlo.return %t : tensor<i1>
    }, {
    ^bb0(%b: tensor<4xf32>):
      %z = hlo.constant dense<0.0> : tensor<4xf32>
      hlo.return %z : tensor<4xf32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    tpu.yield %w : tensor<4xf32>
  }
  func.return
}

// -----

// CHECK: 'hlo.pad' op pads dimension 0, which is padded to its real size (a dynamic size: replicate's maximum_shapes or where(condition)), with high = 2, interior = 0; tpu-pad-dynamic-shapes only supports low padding of such a dimension
func.func @pad_after_the_padding(%a: tensor<4xf32>, %na: tensor<i32>) {
  %r = tpu.replicate([%a] as %x: tensor<4xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
    %z = hlo.constant dense<0.0> : tensor<f32>
        %q = hlo.pad %p, %z, low = [0], high = [2], interior = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<6xf32>
    tpu.yield %q : tensor<6xf32>
  }
  func.return
}

// -----

// CHECK: 'hlo.reshape' op (at model.py:7) has operand 0 padded along dimension 0 (a dynamic size: replicate's maximum_shapes or where(condition)); tpu-pad-dynamic-shapes cannot make it exact on the real sizes: a reshape of [8] to [4, 2] splits padded dimension 0
func.func @reshape_splitting_a_padded_dimension(%a: tensor<8xf32>, %na: tensor<i32>) {
  %r = tpu.replicate([%a] as %x: tensor<8xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8xf32>, tensor<i32>) -> tensor<8xf32>
        %q = hlo.reshape %p : (tensor<8xf32>) -> tensor<4x2xf32> loc("model.py":7:3)
    tpu.yield %q : tensor<4x2xf32>
  }
  func.return
}

// -----

// CHECK: 'hlo.if' op result 0 is padded along dimension 0 with a different real size in each region; tpu-pad-dynamic-shapes needs one real size
func.func @if_branches_of_different_real_sizes(%a: tensor<4xf32>, %na: tensor<i32>, %nb: tensor<i32>, %c: tensor<i1>) {
  %r = tpu.replicate([%a] as %x: tensor<4xf32>, [%na] as %n: tensor<i32>, [%nb] as %m: tensor<i32>, [%c] as %pred: tensor<i1>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
    %q = hlo.set_dimension_size %x, %m, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
        %y = "hlo.if"(%pred) ({
      hlo.return %p : tensor<4xf32>
    }, {
      hlo.return %q : tensor<4xf32>
    }) : (tensor<i1>) -> tensor<4xf32>
    tpu.yield %y : tensor<4xf32>
  }
  func.return
}

// -----

// CHECK: 'hlo.reshape' op has operand 0 padded along dimension 0 (a dynamic size: replicate's maximum_shapes or where(condition)); tpu-pad-dynamic-shapes cannot make it exact on the real sizes: dimensions [0, 1] are padded and merged into one
func.func @two_padded_dimensions_merged(%a: tensor<4x2xf32>, %na: tensor<i32>, %nb: tensor<i32>) {
  %r = tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>, [%nb] as %m: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    %q = hlo.set_dimension_size %p, %m, dim = 1 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
        %f = hlo.reshape %q : (tensor<4x2xf32>) -> tensor<8xf32>
    tpu.yield %f : tensor<8xf32>
  }
  func.return
}

// -----

// A host op that observes a padded value whole gets it sliced to its real
// sizes: outside compilation receives the replica's unpadded value.
// CHECK-LABEL: func @host_print_sees_the_real_value
// CHECK:         %[[L0:.*]] = hlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
// CHECK-NEXT:    %[[C:.*]] = hlo.constant dense<2> : tensor<i32>
// CHECK-NEXT:    %[[L1:.*]] = hlo.reshape %[[C]] : (tensor<i32>) -> tensor<1xi32>
// CHECK-NEXT:    %[[L:.*]] = hlo.concatenate %[[L0]], %[[L1]] dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
// CHECK-NEXT:    %[[S:.*]] = hlo.constant dense<0> : tensor<2xi32>
// CHECK-NEXT:    %[[T:.*]] = hlo.constant dense<1> : tensor<2xi32>
// CHECK-NEXT:    %[[R:.*]] = hlo.real_dynamic_slice %x, %[[S]], %[[L]], %[[T]]
// CHECK-NEXT:    hlo.print(%[[R]])
func.func @host_print_sees_the_real_value(%a: tensor<4x2xf32>, %na: tensor<i32>) {
  tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    tpu.outside_compilation "0" -> () {
      hlo.print(%p) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<4x2xf32>
      tpu.yield
    }
    tpu.yield
  }
  func.return
}

// -----

// Concatenate's gradient slices each operand's static range: it starts at
// the operand's real offset instead, with the operand's real size.
// CHECK-LABEL: func @slice_of_a_concatenation_starts_at_the_real_offset
// CHECK:         %[[OFF:.*]] = hlo.add %{{.*}}, %n : tensor<i32>
// CHECK-NEXT:    %c = hlo.dynamic_update_slice %{{.*}}, %x at [%[[OFF]], %{{.*}}]
// CHECK:         %e = hlo.exponential %c : tensor<8x2xf32>
// CHECK-NEXT:    %[[Z:.*]] = hlo.constant dense<0> : tensor<i32>
// CHECK-NEXT:    %s = hlo.dynamic_slice %e[%[[OFF]], %[[Z]]] sizes = [4, 2] : (tensor<8x2xf32>, tensor<i32>, tensor<i32>) -> tensor<4x2xf32>
// CHECK-NEXT:    tpu.yield %s, %n
func.func @slice_of_a_concatenation_starts_at_the_real_offset(%a: tensor<4x2xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    %c = hlo.concatenate %p, %p dim = 0 : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<8x2xf32>
    %e = hlo.exponential %c : tensor<8x2xf32>
    %s = hlo.slice %e, start = [4, 0], limit = [8, 2], strides = [1, 1] : (tensor<8x2xf32>) -> tensor<4x2xf32>
    %k = hlo.get_dimension_size %s, dim = 0 : (tensor<4x2xf32>) -> tensor<i32>
    tpu.yield %s, %k : tensor<4x2xf32>, tensor<i32>
  }
  func.return
}

// -----

// A compacting reshape's gradient reshapes back: each row's real elements
// return to their padded place (one dynamic_slice per row).
// CHECK-LABEL: func @reshape_back_to_a_compacted_shape_expands
// CHECK:         %e = hlo.exponential %f : tensor<8xf32>
// CHECK:         %[[R0:.*]] = hlo.dynamic_slice %e[%[[O0:.*]]] sizes = [4] : (tensor<8xf32>, tensor<i32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[B0:.*]] = hlo.reshape %[[R0]] : (tensor<4xf32>) -> tensor<1x4xf32>
// CHECK:         %[[U0:.*]] = hlo.dynamic_update_slice %{{.*}}, %[[B0]] at [%{{.*}}, %{{.*}}] : (tensor<2x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<2x4xf32>
// CHECK-NEXT:    %[[O1:.*]] = hlo.add %[[O0]], %n : tensor<i32>
// CHECK-NEXT:    %[[R1:.*]] = hlo.dynamic_slice %e[%[[O1]]] sizes = [4]
// CHECK:         %[[U1:.*]] = hlo.dynamic_update_slice %[[U0]], %{{.*}} at [%{{.*}}, %{{.*}}]
// CHECK:         %b = hlo.reshape %[[U1]] : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    tpu.yield %b, %n
func.func @reshape_back_to_a_compacted_shape_expands(%a: tensor<2x4xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<2x4xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 1 : (tensor<2x4xf32>, tensor<i32>) -> tensor<2x4xf32>
    %f = hlo.reshape %p : (tensor<2x4xf32>) -> tensor<8xf32>
    %e = hlo.exponential %f : tensor<8xf32>
    %b = hlo.reshape %e : (tensor<8xf32>) -> tensor<2x4xf32>
    %k = hlo.get_dimension_size %b, dim = 1 : (tensor<2x4xf32>) -> tensor<i32>
    tpu.yield %b, %k : tensor<2x4xf32>, tensor<i32>
  }
  func.return
}

// -----

// A reshape that splits a padded dimension is exact when its real size is
// known to be a multiple of the split (here n * 2 from a merge): the
// gradient of a flatten.
// CHECK-LABEL: func @split_of_a_merged_size
// CHECK:         %[[M:.*]] = hlo.multiply %n, %{{.*}} : tensor<i32>
// CHECK:         %[[D:.*]] = hlo.divide %[[M]], %{{.*}} : tensor<i32>
// CHECK-NEXT:    %b = hlo.reshape %f : (tensor<8xf32>) -> tensor<4x2xf32>
// CHECK-NEXT:    tpu.yield %b, %[[D]]
func.func @split_of_a_merged_size(%a: tensor<4x2xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4x2xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
    %f = hlo.reshape %p : (tensor<4x2xf32>) -> tensor<8xf32>
    %b = hlo.reshape %f : (tensor<8xf32>) -> tensor<4x2xf32>
    %k = hlo.get_dimension_size %b, dim = 0 : (tensor<4x2xf32>) -> tensor<i32>
    tpu.yield %b, %k : tensor<4x2xf32>, tensor<i32>
  }
  func.return
}

// -----

// A dynamic_slice window along a padded dimension starts inside the real
// bounds: max(0, min(start, n - 2)), as the unpadded op clamps it.
// CHECK-LABEL: func @dynamic_slice_clamps_to_the_real_size
// CHECK:         %[[W:.*]] = hlo.constant dense<2> : tensor<i32>
// CHECK-NEXT:    %[[L:.*]] = hlo.subtract %n, %[[W]] : tensor<i32>
// CHECK-NEXT:    %[[M:.*]] = hlo.minimum %i, %[[L]] : tensor<i32>
// CHECK-NEXT:    %[[Z:.*]] = hlo.constant dense<0> : tensor<i32>
// CHECK-NEXT:    %[[S:.*]] = hlo.maximum %[[M]], %[[Z]] : tensor<i32>
// CHECK-NEXT:    %w = hlo.dynamic_slice %x[%[[S]], %j] sizes = [2, 3]
func.func @dynamic_slice_clamps_to_the_real_size(%a: tensor<8x3xf32>, %na: tensor<i32>, %ia: tensor<i32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x3xf32>, [%na] as %n: tensor<i32>, [%ia] as %i: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8x3xf32>, tensor<i32>) -> tensor<8x3xf32>
    %j = hlo.constant dense<0> : tensor<i32>
    %w = hlo.dynamic_slice %p[%i, %j] sizes = [2, 3] : (tensor<8x3xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>
    tpu.yield %w : tensor<2x3xf32>
  }
  func.return
}

// -----

// A loop value keeps its real size through hlo.while: a reduction in the
// condition and one after the loop see only the real elements.
// CHECK-LABEL: func @while_carries_the_real_size
// CHECK:         %w = hlo.while
// CHECK:           %[[M:.*]] = hlo.compare LT, %{{.*}}, %{{.*}} : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
// CHECK:           %[[C:.*]] = hlo.select %[[M]], %c, %{{.*}}
// CHECK-NEXT:      %s = hlo.reduce(%[[C]] init : %z) applies add
// CHECK:         %[[R:.*]] = hlo.select %{{.*}}, %w, %{{.*}}
// CHECK-NEXT:    %t = hlo.reduce(%[[R]] init : %z2) applies add
// CHECK-NEXT:    tpu.yield %t, %n
func.func @while_carries_the_real_size(%a: tensor<4xf32>, %na: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<4xf32>, [%na] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<4xf32>, tensor<i32>) -> tensor<4xf32>
    %w = "hlo.while"(%p) ({
    ^bb0(%c: tensor<4xf32>):
      %z = hlo.constant dense<0.0> : tensor<f32>
      %s = hlo.reduce(%c init : %z) applies add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
      %lim = hlo.constant dense<100.0> : tensor<f32>
      %go = hlo.compare LT, %s, %lim : (tensor<f32>, tensor<f32>) -> tensor<i1>
      hlo.return %go : tensor<i1>
    }, {
    ^bb0(%b: tensor<4xf32>):
      %d = hlo.add %b, %b : tensor<4xf32>
      hlo.return %d : tensor<4xf32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    %z2 = hlo.constant dense<0.0> : tensor<f32>
    %t = hlo.reduce(%w init : %z2) applies add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
    %k = hlo.get_dimension_size %w, dim = 0 : (tensor<4xf32>) -> tensor<i32>
    tpu.yield %t, %k : tensor<f32>, tensor<i32>
  }
  func.return
}

// -----

// Indices with a dynamic row count (the one-argument where, gather_nd of its
// rows): the gather's result takes their real size, so the sum over it masks
// the padding; the scatter-add of its gradient drops the padding's rows
// (their index rows become -1, out of range, which StableHLO's scatter skips).
// CHECK-LABEL: func @gather_and_scatter_of_padded_indices
// CHECK:         %g = hlo.gather %x[%i0]
// CHECK:         %[[GM:.*]] = hlo.select %{{.*}}, %g, %{{.*}} : (tensor<6xi1>, tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
// CHECK-NEXT:    %s = hlo.reduce(%[[GM]] init : %zero) applies add across dimensions = [0]
// CHECK:         %[[M1:.*]] = hlo.constant dense<-1> : tensor<i64>
// CHECK-NEXT:    %[[I:.*]] = hlo.iota dim = 0 : tensor<6x2xi32>
// CHECK:         %[[IM:.*]] = hlo.select %{{.*}}, %i0, %{{.*}} : (tensor<6x2xi1>, tensor<6x2xi64>, tensor<6x2xi64>) -> tensor<6x2xi64>
// CHECK-NEXT:    %sc = hlo.scatter %x[%[[IM]]], %g applies add
// CHECK-NOT:     hlo.set_dimension_size
func.func @gather_and_scatter_of_padded_indices(%a: tensor<2x3xf32>, %i: tensor<6x2xi64>, %k: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<2x3xf32>, [%i] as %i0: tensor<6x2xi64>, [%k] as %n: tensor<i32>) {n = 1 : i64} {
    %idx = hlo.set_dimension_size %i0, %n, dim = 0 : (tensor<6x2xi64>, tensor<i32>) -> tensor<6x2xi64>
    %g = hlo.gather %x[%idx] offset_dims = [], collapsed_slice_dims = [0, 1], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0, 1], index_vector_dim = 1, slice_sizes = [1, 1] : (tensor<2x3xf32>, tensor<6x2xi64>) -> tensor<6xf32>
    %zero = hlo.constant dense<0.000000e+00> : tensor<f32>
    %s = hlo.reduce(%g init : %zero) applies add across dimensions = [0] : (tensor<6xf32>, tensor<f32>) -> tensor<f32>
    %sc = hlo.scatter %x[%idx], %g applies add update_window_dims = [], inserted_window_dims = [0, 1], input_batching_dims = [], scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1 : (tensor<2x3xf32>, tensor<6x2xi64>, tensor<6xf32>) -> tensor<2x3xf32>
    tpu.yield %s, %sc : tensor<f32>, tensor<2x3xf32>
  }
  func.return
}

// -----

// A gather from a padded operand is refused, naming the op and the operand.
func.func @gather_of_a_padded_operand(%a: tensor<8x3xf32>, %i: tensor<2x1xi32>, %k: tensor<i32>) {
  %r = tpu.replicate([%a] as %x: tensor<8x3xf32>, [%i] as %idx: tensor<2x1xi32>, [%k] as %n: tensor<i32>) {n = 1 : i64} {
    %p = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8x3xf32>, tensor<i32>) -> tensor<8x3xf32>
    // expected-error @+1 {{'hlo.gather' op has operand 0 padded along dimension 0 (a dynamic size: replicate's maximum_shapes or where(condition)); tpu-pad-dynamic-shapes cannot make it exact on the real sizes: the gathered operand itself is padded}}
    %g = hlo.gather %p[%idx] offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [], start_indices_batching_dims = [], start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 3] : (tensor<8x3xf32>, tensor<2x1xi32>) -> tensor<2x3xf32>
    tpu.yield %g : tensor<2x3xf32>
  }
  func.return
}
