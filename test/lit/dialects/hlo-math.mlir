// The ops of dialects/hlo_math.py (StableHLO spec: sign, ceil,
// round_nearest_even, rsqrt, log_plus_one, sine, cosine, is_finite, reverse;
// XLA HLO's erf): round trip in their custom and generic forms.
// RUN: xtpu-opt %s --split-input-file | xtpu-opt --split-input-file | filecheck %s
// RUN: xtpu-opt %s --split-input-file --print-op-generic | xtpu-opt --split-input-file | filecheck %s

// CHECK-LABEL: func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<f64>, %i: tensor<4xi32>) {
// CHECK-NEXT:    %0 = hlo.sign %a : tensor<2x3xf32>
// CHECK-NEXT:    %1 = hlo.sign %i : tensor<4xi32>
// CHECK-NEXT:    %2 = hlo.ceil %b : tensor<f64>
// CHECK-NEXT:    %3 = hlo.round_nearest_even %a : tensor<2x3xf32>
// CHECK-NEXT:    %4 = hlo.rsqrt %a : tensor<2x3xf32>
// CHECK-NEXT:    %5 = hlo.log_plus_one %b : tensor<f64>
// CHECK-NEXT:    %6 = hlo.sine %a : tensor<2x3xf32>
// CHECK-NEXT:    %7 = hlo.cosine %a : tensor<2x3xf32>
// CHECK-NEXT:    %8 = hlo.erf %b : tensor<f64>
// CHECK-NEXT:    %9 = hlo.is_finite %a : (tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT:    func.return
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<f64>, %i: tensor<4xi32>) {
  %0 = hlo.sign %a : tensor<2x3xf32>
  %1 = hlo.sign %i : tensor<4xi32>
  %2 = hlo.ceil %b : tensor<f64>
  %3 = hlo.round_nearest_even %a : tensor<2x3xf32>
  %4 = hlo.rsqrt %a : tensor<2x3xf32>
  %5 = hlo.log_plus_one %b : tensor<f64>
  %6 = hlo.sine %a : tensor<2x3xf32>
  %7 = hlo.cosine %a : tensor<2x3xf32>
  %8 = hlo.erf %b : tensor<f64>
  %9 = hlo.is_finite %a : (tensor<2x3xf32>) -> tensor<2x3xi1>
  func.return
}

// -----

// CHECK-LABEL: func.func @reverse(%x: tensor<2x3x4xf32>) {
// CHECK-NEXT:    %0 = hlo.reverse %x, dims = [0, 2] : tensor<2x3x4xf32>
// CHECK-NEXT:    %1 = hlo.reverse %x, dims = [] : tensor<2x3x4xf32>
// CHECK-NEXT:    func.return
func.func @reverse(%x: tensor<2x3x4xf32>) {
  %0 = hlo.reverse %x, dims = [0, 2] : tensor<2x3x4xf32>
  %1 = hlo.reverse %x, dims = [] : tensor<2x3x4xf32>
  func.return
}
