// Round trip of every hlo op in its custom form and in the generic form.
// RUN: xtpu-opt %s | xtpu-opt | filecheck %s
// RUN: xtpu-opt %s --print-op-generic | xtpu-opt | filecheck %s

// CHECK-LABEL: func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %i: tensor<4xi32>, %p: tensor<2x3xi1>) {
// CHECK-NEXT:  %add = hlo.add %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %sub = hlo.subtract %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %mul = hlo.multiply %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %div = hlo.divide %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %pow = hlo.power %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %max = hlo.maximum %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %min = hlo.minimum %a, %b : tensor<2x3xf32>
// CHECK-NEXT:  %and = hlo.and %i, %i : tensor<4xi32>
// CHECK-NEXT:  %or = hlo.or %p, %p : tensor<2x3xi1>
// CHECK-NEXT:  %neg = hlo.negate %a : tensor<2x3xf32>
// CHECK-NEXT:  %abs = hlo.abs %i : tensor<4xi32>
// CHECK-NEXT:  %exp = hlo.exponential %a : tensor<2x3xf32>
// CHECK-NEXT:  %log = hlo.log %a : tensor<2x3xf32>
// CHECK-NEXT:  %sqrt = hlo.sqrt %a : tensor<2x3xf32>
// CHECK-NEXT:  %tanh = hlo.tanh %a : tensor<2x3xf32>
// CHECK-NEXT:  %sig = hlo.logistic %a : tensor<2x3xf32>
// CHECK-NEXT:  %not = hlo.not %p : tensor<2x3xi1>
// CHECK-NEXT:  %cmp = hlo.compare GE, %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK-NEXT:  %sel = hlo.select %cmp, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %cvt = hlo.convert %a : (tensor<2x3xf32>) -> tensor<2x3xi64>
// CHECK-NEXT:  func.return
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %i: tensor<4xi32>, %p: tensor<2x3xi1>) {
  %add = hlo.add %a, %b : tensor<2x3xf32>
  %sub = hlo.subtract %a, %b : tensor<2x3xf32>
  %mul = hlo.multiply %a, %b : tensor<2x3xf32>
  %div = hlo.divide %a, %b : tensor<2x3xf32>
  %pow = hlo.power %a, %b : tensor<2x3xf32>
  %max = hlo.maximum %a, %b : tensor<2x3xf32>
  %min = hlo.minimum %a, %b : tensor<2x3xf32>
  %and = hlo.and %i, %i : tensor<4xi32>
  %or = hlo.or %p, %p : tensor<2x3xi1>
  %neg = hlo.negate %a : tensor<2x3xf32>
  %abs = hlo.abs %i : tensor<4xi32>
  %exp = hlo.exponential %a : tensor<2x3xf32>
  %log = hlo.log %a : tensor<2x3xf32>
  %sqrt = hlo.sqrt %a : tensor<2x3xf32>
  %tanh = hlo.tanh %a : tensor<2x3xf32>
  %sig = hlo.logistic %a : tensor<2x3xf32>
  %not = hlo.not %p : tensor<2x3xi1>
  %cmp = hlo.compare GE, %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  %sel = hlo.select %cmp, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %cvt = hlo.convert %a : (tensor<2x3xf32>) -> tensor<2x3xi64>
  func.return
}

// CHECK-LABEL: func.func @constants_and_shapes(%x: tensor<2x3xf32>) {
// CHECK-NEXT:  %c = hlo.constant dense<[1, 2, 3]> : tensor<3xi32>
// CHECK-NEXT:  %s = hlo.constant dense<2.500000e+00> : tensor<f64>
// CHECK-NEXT:  %str = hlo.string_constant ["a", "b"] : tensor<2x!hlo.string>
// CHECK-NEXT:  %iota = hlo.iota dim = 1 : tensor<2x4xi64>
// CHECK-NEXT:  %bc = hlo.broadcast_in_dim %x, dims = [0, 2] : (tensor<2x3xf32>) -> tensor<2x5x3xf32>
// CHECK-NEXT:  %rs = hlo.reshape %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:  %tr = hlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:  %dot = hlo.dot_general %x, %tr, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
// CHECK-NEXT:  %z = hlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:  %red = hlo.reduce(%x init : %z) applies max across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT:  %sl = hlo.slice %x, start = [0, 1], limit = [2, 3], strides = [1, 2] : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK-NEXT:  %cat = hlo.concatenate %x, %x dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:  %i0 = hlo.constant dense<1> : tensor<i32>
// CHECK-NEXT:  %dyn = hlo.dynamic_slice %x[%i0, %i0] sizes = [1, 2] : (tensor<2x3xf32>, tensor<i32>, tensor<i32>) -> tensor<1x2xf32>
// CHECK-NEXT:  %pad = hlo.pad %x, %z, low = [0, 1], high = [1, 0], interior = [0, 2] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x8xf32>
// CHECK-NEXT:  %crop = hlo.pad %x, %z, low = [-1, 0], high = [0, -2], interior = [1, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x1xf32>
// CHECK-NEXT:  %dus = hlo.dynamic_update_slice %x, %dyn at [%i0, %i0] : (tensor<2x3xf32>, tensor<1x2xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %dus0 = hlo.dynamic_update_slice %z, %z at [] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT:  func.return
func.func @constants_and_shapes(%x: tensor<2x3xf32>) {
  %c = hlo.constant dense<[1, 2, 3]> : tensor<3xi32>
  %s = hlo.constant dense<2.5> : tensor<f64>
  %str = hlo.string_constant ["a", "b"] : tensor<2x!hlo.string>
  %iota = hlo.iota dim = 1 : tensor<2x4xi64>
  %bc = hlo.broadcast_in_dim %x, dims = [0, 2] : (tensor<2x3xf32>) -> tensor<2x5x3xf32>
  %rs = hlo.reshape %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %tr = hlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %dot = hlo.dot_general %x, %tr, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  %z = hlo.constant dense<0.0> : tensor<f32>
  %red = hlo.reduce(%x init: %z) applies max across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
  %sl = hlo.slice %x, start = [0, 1], limit = [2, 3], strides = [1, 2] : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %cat = hlo.concatenate %x, %x dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %i0 = hlo.constant dense<1> : tensor<i32>
  %dyn = hlo.dynamic_slice %x[%i0, %i0] sizes = [1, 2] : (tensor<2x3xf32>, tensor<i32>, tensor<i32>) -> tensor<1x2xf32>
  %pad = hlo.pad %x, %z, low = [0, 1], high = [1, 0], interior = [0, 2] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x8xf32>
  %crop = hlo.pad %x, %z, low = [-1, 0], high = [0, -2], interior = [1, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x1xf32>
  %dus = hlo.dynamic_update_slice %x, %dyn at [%i0, %i0] : (tensor<2x3xf32>, tensor<1x2xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>
  %dus0 = hlo.dynamic_update_slice %z, %z at [] : (tensor<f32>, tensor<f32>) -> tensor<f32>
  func.return
}

// Float elements keep their bits: a hex element is the IEEE bit pattern (in
// either case), non-finite values print as upper-case bit patterns, -0.0
// keeps its sign and is no splat of 0.0, and finite f32 values whose 9
// digits show no '.' print in hex too.
// CHECK-LABEL: func.func @float_bit_patterns() {
// CHECK-NEXT:  %ninf = hlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT:  %inf = hlo.constant dense<0x7F800000> : tensor<3xf32>
// CHECK-NEXT:  %nan = hlo.constant dense<[0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7F800001, 1.000000e+00]> : tensor<5xf32>
// CHECK-NEXT:  %zeros = hlo.constant dense<[0.000000e+00, -0.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:  %big = hlo.constant dense<[0x4CEB79A3, 0x4CEB79A3, 2.500000e+00]> : tensor<3xf32>
// CHECK-NEXT:  %d = hlo.constant dense<[[0x7FF0000000000000, 0xFFF0000000000000], [0x7FF8000000000000, 0x7FF0000000000001]]> : tensor<2x2xf64>
// CHECK-NEXT:  %dnz = hlo.constant dense<-0.000000e+00> : tensor<f64>
// CHECK-NEXT:  func.return
func.func @float_bit_patterns() {
  %ninf = hlo.constant dense<0xff800000> : tensor<f32>
  %inf = hlo.constant dense<0x7F800000> : tensor<3xf32>
  %nan = hlo.constant dense<[0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7F800001, 1.0]> : tensor<5xf32>
  %zeros = hlo.constant dense<[0.0, -0.0]> : tensor<2xf32>
  %big = hlo.constant dense<[123456792.0, 0x4CEB79A3, 2.5]> : tensor<3xf32>
  %d = hlo.constant dense<[[0x7FF0000000000000, 0xFFF0000000000000], [0x7FF8000000000000, 0x7FF0000000000001]]> : tensor<2x2xf64>
  %dnz = hlo.constant dense<-0.0> : tensor<f64>
  func.return
}

// CHECK-LABEL: func.func @host_ops(%x: tensor<2xf32>) {
// CHECK-NEXT:  %f = hlo.string_format "x={} and {}"(%x, %x) summarize = 3 : (tensor<2xf32>, tensor<2xf32>) -> tensor<!hlo.string>
// CHECK-NEXT:  %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f64>
// CHECK-NEXT:  hlo.print(%f, %x) sep = ", " end = "\0A" to "stderr" summarize = 2 : tensor<!hlo.string>, tensor<2xf32>
// CHECK-NEXT:  hlo.print() sep = " " end = "" to "file:///tmp/log.txt" summarize = 3{{$}}
// CHECK-NEXT:  func.return
func.func @host_ops(%x: tensor<2xf32>) {
  %f = hlo.string_format "x={} and {}" (%x, %x) summarize = 3 : (tensor<2xf32>, tensor<2xf32>) -> tensor<!hlo.string>
  %n = hlo.string_to_number %f : (tensor<!hlo.string>) -> tensor<f64>
  hlo.print (%f, %x) sep = ", " end = "\n" to "stderr" summarize = 2 : tensor<!hlo.string>, tensor<2xf32>
  hlo.print () sep = " " end = "" to "file:///tmp/log.txt" summarize = 3
  func.return
}

// CHECK-LABEL: func.func @summaries(%x: tensor<f32>, %s: tensor<i64>, %i: tensor<i32>, %r: tensor<i32>) {
// CHECK-NEXT:  hlo.summary_scalar "loss" = %x at step %s to "/tmp/logs" : tensor<f32>, tensor<i64>
// CHECK-NEXT:  hlo.summary_scalar "eval/acc" = %i at step %i if replica %r is zero to "/tmp/logs" description "top-1" : tensor<i32>, tensor<i32>, tensor<i32>
// CHECK-NEXT:  hlo.summary_flush "/tmp/logs"
// CHECK-NEXT:  func.return
func.func @summaries(%x: tensor<f32>, %s: tensor<i64>, %i: tensor<i32>, %r: tensor<i32>) {
  hlo.summary_scalar "loss" = %x at step %s to "/tmp/logs" : tensor<f32>, tensor<i64>
  hlo.summary_scalar "eval/acc" = %i at step %i if replica %r is zero to "/tmp/logs" description "top-1" : tensor<i32>, tensor<i32>, tensor<i32>
  hlo.summary_flush "/tmp/logs"
  func.return
}
