// xtpu-opt -t stablehlo on a program with host code: refused, naming the
// host program; -t 'stablehlo{host_programs=omit}' gives the device program.
// RUN: not xtpu-opt %s -t stablehlo 2>&1 | filecheck %s --check-prefix=ERR
// RUN: xtpu-opt %s -t 'stablehlo{host_programs=omit}' | filecheck %s --check-prefix=OMIT

// A host program is refused by name; with host_programs=omit the device
// program's host transfers are stablehlo.send / recv with TF's rendezvous names.
// ERR: error: the module has host programs, which have no StableHLO form: @host0 (outside_compilation cluster '0')
// OMIT-LABEL: sym_name = "with_host"
// OMIT:         %[[T:.*]] = "stablehlo.after_all"() : () -> !stablehlo.token
// OMIT-NEXT:    %[[T1:.*]] = "stablehlo.send"(%{{.*}}, %[[T]]) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 2>, is_host_transfer = true}> {mhlo.frontend_attributes = {_xla_host_transfer_handler_name = "tf_rendezvous", _xla_host_transfer_rendezvous = "host_compute_channel_0_args_dtoh_0", _xla_host_transfer_original_type = "f32"}, mhlo.sharding = "{maximal device=0}"}
// OMIT-NEXT:    %{{.*}}, %{{.*}} = "stablehlo.recv"(%[[T1]]) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 3>, is_host_transfer = true}> {mhlo.frontend_attributes = {_xla_host_transfer_handler_name = "tf_rendezvous", _xla_host_transfer_rendezvous = "host_compute_channel_0_retvals_htod_0", _xla_host_transfer_original_type = "f32"}
// OMIT-NOT:     host0
func.func @with_host(%a: tensor<f32>) -> tensor<f32> {
  %r = tpu.replicate([%a] as %x: tensor<f32>) {n = 1 : i64} {
    tpu.send_to_host "host_compute_channel_0_args" (%x : tensor<f32>)
    %y = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
    tpu.yield %y : tensor<f32>
  }
  func.return %r : tensor<f32>
}
func.func @host0() attributes {tpu.outside_compilation_cluster = "0"} {
  %v = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
  tpu.send_from_host "host_compute_channel_0_retvals" (%v : tensor<f32>)
  func.return
}
