// hlo-canonicalize: the simplifications TF's bridge runs before it extracts
// outside compilation (canonicalize, cse), on hlo ops: identities that hold
// for every value, CSE that never crosses a tpu.outside_compilation boundary,
// and dead code without side effects.
// RUN: xtpu-opt %s --split-input-file -p hlo-canonicalize | filecheck %s

// ones * w is w: the constant is seen through broadcast_in_dim, on both sides.
// CHECK-LABEL: func @multiply_by_one
// CHECK:         tpu.replicate([%a] as %w: tensor<2xf32>) {n = 1 : i64} {
// CHECK-NEXT:      %y = hlo.divide %w, %w : tensor<2xf32>
// CHECK-NEXT:      tpu.yield %y
func.func @multiply_by_one(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tpu.replicate([%a] as %w: tensor<2xf32>) {n = 1 : i64} {
    %one = hlo.constant dense<1.000000e+00> : tensor<f32>
    %ones = hlo.broadcast_in_dim %one, dims = [] : (tensor<f32>) -> tensor<2xf32>
    %p = hlo.multiply %ones, %w : tensor<2xf32>
    %q = hlo.multiply %p, %ones : tensor<2xf32>
    %r = hlo.divide %q, %ones : tensor<2xf32>
    %y = hlo.divide %r, %p : tensor<2xf32>
    tpu.yield %y : tensor<2xf32>
  }
  func.return %0 : tensor<2xf32>
}

// -----

// x + (-0.0) and x - 0.0 are x; x + 0.0 is not (-0.0 + 0.0 is +0.0).
// CHECK-LABEL: func @float_zeros
// CHECK:         %[[Z:.*]] = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %p = hlo.add %x, %[[Z]] : tensor<f32>
// CHECK-NEXT:    %y = hlo.multiply %x, %p : tensor<f32>
func.func @float_zeros(%a: tensor<f32>) -> tensor<f32> {
  %0 = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %zero = hlo.constant dense<0.000000e+00> : tensor<f32>
    %nzero = hlo.constant dense<-0.000000e+00> : tensor<f32>
    %s = hlo.add %x, %nzero : tensor<f32>
    %t = hlo.subtract %s, %zero : tensor<f32>
    %p = hlo.add %x, %zero : tensor<f32>
    %y = hlo.multiply %t, %p : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// Integers: x + 0, 0 + x, x - 0; a convert or reshape to the same type.
// CHECK-LABEL: func @integer_zeros_and_no_op_conversions
// CHECK:         tpu.replicate([%a] as %x: tensor<3xi32>) {n = 1 : i64} {
// CHECK-NEXT:      tpu.yield %x : tensor<3xi32>
func.func @integer_zeros_and_no_op_conversions(%a: tensor<3xi32>) -> tensor<3xi32> {
  %0 = tpu.replicate([%a] as %x: tensor<3xi32>) {n = 1 : i64} {
    %zero = hlo.constant dense<0> : tensor<3xi32>
    %s = hlo.add %zero, %x : tensor<3xi32>
    %t = hlo.subtract %s, %zero : tensor<3xi32>
    %c = hlo.convert %t : (tensor<3xi32>) -> tensor<3xi32>
    %r = hlo.reshape %c : (tensor<3xi32>) -> tensor<3xi32>
    tpu.yield %r : tensor<3xi32>
  }
  func.return %0 : tensor<3xi32>
}

// -----

// A float convert back from an exact widening is the original value (XLA's
// algebraic simplifier: a bf16 NaN keeps its payload); the other order
// rounds, and a narrowing pair too: both stay.
// CHECK-LABEL: func @convert_pairs
// CHECK:         tpu.replicate([%a] as %x: tensor<3xbf16>, [%b] as %f: tensor<3xf32>, [%c] as %h: tensor<3xf16>) {n = 1 : i64} {
// CHECK-NEXT:      %r = hlo.convert %f : (tensor<3xf32>) -> tensor<3xbf16>
// CHECK-NEXT:      %s = hlo.convert %r : (tensor<3xbf16>) -> tensor<3xf32>
// CHECK-NEXT:      %n = hlo.convert %h : (tensor<3xf16>) -> tensor<3xbf16>
// CHECK-NEXT:      %m = hlo.convert %n : (tensor<3xbf16>) -> tensor<3xf16>
// CHECK-NEXT:      tpu.yield %x, %s, %h, %m : tensor<3xbf16>, tensor<3xf32>, tensor<3xf16>, tensor<3xf16>
func.func @convert_pairs(%a: tensor<3xbf16>, %b: tensor<3xf32>, %c: tensor<3xf16>) -> (tensor<3xbf16>, tensor<3xf32>, tensor<3xf16>, tensor<3xf16>) {
  %0, %1, %2, %3 = tpu.replicate([%a] as %x: tensor<3xbf16>, [%b] as %f: tensor<3xf32>, [%c] as %h: tensor<3xf16>) {n = 1 : i64} {
    %w = hlo.convert %x : (tensor<3xbf16>) -> tensor<3xf32>
    %y = hlo.convert %w : (tensor<3xf32>) -> tensor<3xbf16>
    %r = hlo.convert %f : (tensor<3xf32>) -> tensor<3xbf16>
    %s = hlo.convert %r : (tensor<3xbf16>) -> tensor<3xf32>
    %hw = hlo.convert %h : (tensor<3xf16>) -> tensor<3xf64>
    %hb = hlo.convert %hw : (tensor<3xf64>) -> tensor<3xf16>
    %n = hlo.convert %h : (tensor<3xf16>) -> tensor<3xbf16>
    %m = hlo.convert %n : (tensor<3xbf16>) -> tensor<3xf16>
    tpu.yield %y, %s, %hb, %m : tensor<3xbf16>, tensor<3xf32>, tensor<3xf16>, tensor<3xf16>
  }
  func.return %0, %1, %2, %3 : tensor<3xbf16>, tensor<3xf32>, tensor<3xf16>, tensor<3xf16>
}

// -----

// A constant whose elements differ is no identity.
// CHECK-LABEL: func @not_a_splat
// CHECK:         %y = hlo.multiply %x, %c : tensor<2xf32>
func.func @not_a_splat(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tpu.replicate([%a] as %x: tensor<2xf32>) {n = 1 : i64} {
    %c = hlo.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
    %y = hlo.multiply %x, %c : tensor<2xf32>
    tpu.yield %y : tensor<2xf32>
  }
  func.return %0 : tensor<2xf32>
}

// -----

// CSE merges equal pure ops of one side; the copy inside the cluster stays
// (host code computes its own), and the loop body reuses the outer one.
// CHECK-LABEL: func @cse_per_side
// CHECK:         %e = hlo.exponential %x
// CHECK-NEXT:    %[[H:.*]] = tpu.outside_compilation "0" -> (tensor<f32>) {
// CHECK-NEXT:      %[[HE:.*]] = hlo.exponential %x
// CHECK-NEXT:      %[[HS:.*]] = hlo.add %[[HE]], %[[HE]]
// CHECK-NEXT:      tpu.yield %[[HS]]
// CHECK:         hlo.while
// CHECK:         ^bb0(%i: tensor<f32>):
// CHECK-NEXT:      %m = hlo.multiply %i, %e
// CHECK-NEXT:      hlo.return %m
// CHECK:         %s = hlo.add %e, %e : tensor<f32>
// CHECK-NEXT:    %t = hlo.add %s, %[[H]]
func.func @cse_per_side(%a: tensor<f32>) -> tensor<f32> {
  %0 = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %e = hlo.exponential %x : tensor<f32>
    %h = tpu.outside_compilation "0" -> (tensor<f32>) {
      %he = hlo.exponential %x : tensor<f32>
      %he2 = hlo.exponential %x : tensor<f32>
      %hs = hlo.add %he, %he2 : tensor<f32>
      tpu.yield %hs : tensor<f32>
    }
    %w = hlo.while(%i0 = %x) : tensor<f32> cond {
      %ten = hlo.constant dense<1.000000e+01> : tensor<f32>
      %p = hlo.compare LT, %i0, %ten : (tensor<f32>, tensor<f32>) -> tensor<i1>
      hlo.return %p : tensor<i1>
    } do {
    ^bb0(%i: tensor<f32>):
      %e2 = hlo.exponential %x : tensor<f32>
      %m = hlo.multiply %i, %e2 : tensor<f32>
      hlo.return %m : tensor<f32>
    }
    %e3 = hlo.exponential %x : tensor<f32>
    %s = hlo.add %e, %e3 : tensor<f32>
    %t = hlo.add %s, %h : tensor<f32>
    %u = hlo.add %t, %w : tensor<f32>
    tpu.yield %u : tensor<f32>
  }
  func.return %0 : tensor<f32>
}

// -----

// Dead code goes: pure ops and a cluster without side effects whose results
// nothing uses. A print, its cluster and what it prints stay.
// CHECK-LABEL: func @dead_code
// CHECK:         tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
// CHECK-NEXT:      %n = hlo.negate %x
// CHECK-NEXT:      tpu.outside_compilation "1" {
// CHECK-NEXT:        hlo.print(%n)
// CHECK-NEXT:        tpu.yield
// CHECK-NEXT:      }
// CHECK-NEXT:      tpu.yield %x
func.func @dead_code(%a: tensor<f32>) -> tensor<f32> {
  %0 = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    %d = hlo.exponential %x : tensor<f32>
    %dd = hlo.multiply %d, %d : tensor<f32>
    %h = tpu.outside_compilation "0" -> (tensor<f32>) {
      %hd = hlo.log %x : tensor<f32>
      tpu.yield %hd : tensor<f32>
    }
    %n = hlo.negate %x : tensor<f32>
    tpu.outside_compilation "1" {
      hlo.print (%n) sep = " " end = "\n" to "stdout" summarize = 3 : tensor<f32>
      tpu.yield
    }
    tpu.yield %x : tensor<f32>
  }
  func.return %0 : tensor<f32>
}
