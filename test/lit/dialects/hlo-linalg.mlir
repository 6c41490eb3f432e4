// hlo.svd (dialects/hlo_linalg.py; TF's Svd, full_matrices = false):
// singular values alone, or with u and v, batched; round trip in its custom
// and generic forms.
// RUN: xtpu-opt %s --split-input-file | xtpu-opt --split-input-file | filecheck %s
// RUN: xtpu-opt %s --split-input-file --print-op-generic | xtpu-opt --split-input-file | filecheck %s

// CHECK-LABEL: func.func @singular_values(%x: tensor<3x4xf32>, %b: tensor<2x5x3xf64>) {
// CHECK-NEXT:    %0 = hlo.svd %x compute_uv = false : (tensor<3x4xf32>) -> tensor<3xf32>
// CHECK-NEXT:    %1 = hlo.svd %b compute_uv = false : (tensor<2x5x3xf64>) -> tensor<2x3xf64>
// CHECK-NEXT:    func.return
func.func @singular_values(%x: tensor<3x4xf32>, %b: tensor<2x5x3xf64>) {
  %0 = hlo.svd %x compute_uv = false : (tensor<3x4xf32>) -> tensor<3xf32>
  %1 = hlo.svd %b compute_uv = false : (tensor<2x5x3xf64>) -> tensor<2x3xf64>
  func.return
}

// -----

// CHECK-LABEL: func.func @with_vectors(%x: tensor<3x4xf32>, %b: tensor<2x5x3xbf16>) {
// CHECK-NEXT:    %s, %u, %v = hlo.svd %x compute_uv = true : (tensor<3x4xf32>) -> (tensor<3xf32>, tensor<3x3xf32>, tensor<4x3xf32>)
// CHECK-NEXT:    %s2, %u2, %v2 = hlo.svd %b compute_uv = true : (tensor<2x5x3xbf16>) -> (tensor<2x3xbf16>, tensor<2x5x3xbf16>, tensor<2x3x3xbf16>)
// CHECK-NEXT:    func.return
func.func @with_vectors(%x: tensor<3x4xf32>, %b: tensor<2x5x3xbf16>) {
  %s, %u, %v = hlo.svd %x compute_uv = true : (tensor<3x4xf32>) -> (tensor<3xf32>, tensor<3x3xf32>, tensor<4x3xf32>)
  %s2, %u2, %v2 = hlo.svd %b compute_uv = true : (tensor<2x5x3xbf16>) -> (tensor<2x3xbf16>, tensor<2x5x3xbf16>, tensor<2x3x3xbf16>)
  func.return
}
