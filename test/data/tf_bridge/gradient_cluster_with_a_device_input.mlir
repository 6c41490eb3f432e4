module attributes {tf.versions = {bad_consumers = [], min_consumer = 0 : i32, producer = 2474 : i32}} {
  func.func @main() {
    %cst = "tf.Const"() <{value = dense<2.000000e+00> : tensor<f32>}> : () -> tensor<f32>
    %cst_0 = "tf.Const"() <{value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}> : () -> tensor<2xf32>
    %cst_1 = "tf.Const"() <{value = dense<[3.000000e+00, 4.000000e+00]> : tensor<2xf32>}> : () -> tensor<2xf32>
    %0 = "tf.TPUCompilationResult"() {_tpu_compilation_status = "cluster", device = ""} : () -> tensor<!tf_type.string>
    %1:2 = tf_device.replicate([%cst_0, %cst_0] as %arg0: tensor<2xf32>, [%cst_1, %cst_1] as %arg1: tensor<2xf32>) {n = 2 : i32} {
      %2 = "tf_device.launch"() <{device = "TPU_REPLICATED_HOST_0"}> ({
        %4 = "tf.Mul"(%arg1, %cst) {_has_manual_control_dependencies = true} : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
        tf_device.return %4 : tensor<2xf32>
      }) : () -> tensor<2xf32>
      %3 = "tf_device.parallel_execute"() ({
        "tf_device.launch"() <{device = "TPU_REPLICATED_HOST_0"}> ({
          %4 = "tf._XlaCompileMlirPlaceholderProgramKey"() : () -> tensor<3x!tf_type.string>
          %cst_2 = "tf.Const"() <{value = dense<0> : tensor<i64>}> : () -> tensor<i64>
          %5 = "tf._XlaRecvAtHostV2"(%4, %cst_2) <{device_type = "TPU", key = "host_compute_channel_0_args"}> {_xla_has_host_transfer = true} : (tensor<3x!tf_type.string>, tensor<i64>) -> tensor<2xf32>
          %6 = "tf.Exp"(%5) : (tensor<2xf32>) -> tensor<2xf32>
          %7 = "tf.Mul"(%2, %6) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
          "tf._XlaSendFromHostV2"(%7, %4, %cst_2) <{device_type = "TPU", key = "host_compute_channel_1_retvals"}> {_xla_has_host_transfer = true} : (tensor<2xf32>, tensor<3x!tf_type.string>, tensor<i64>) -> ()
          tf_device.return
        }) : () -> ()
        tf_device.return
      }, {
        %4 = "tf_device.cluster_func"(%arg0) <{func = @_func}> {_dynamic_arg_index = [], _has_manual_control_dependencies = true, _replication_info = "cluster", _xla_compile_device_type = "TPU", allow_soft_placement = false, computation_shape = [], device = "", device_assignment = [], host_compute_core = [], input_sharding_configuration = [""], num_cores_per_replica = 1 : i64, output_sharding_configuration = [""], padding_map = [], step_marker_location = "STEP_MARK_AT_ENTRY", topology = "", tpu_compile_options_proto = "", use_shardy_partitioner = false, use_spmd_for_xla_partitioning = true, use_tpu = true} : (tensor<2xf32>) -> tensor<2xf32>
        tf_device.return %4 : tensor<2xf32>
      }) : () -> tensor<2xf32>
      tf_device.return %3 : tensor<2xf32>
    }
    return
  }
  func.func private @_func(%arg0: tensor<2xf32> {mhlo.sharding = ""}) -> (tensor<2xf32> {mhlo.sharding = ""}) {
    %cst = "tf.Const"() <{value = dense<5.000000e-01> : tensor<f32>}> : () -> tensor<f32>
    %0 = "tf.Mul"(%arg0, %cst) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
    "tf._XlaHostComputeMlir"(%0) <{host_mlir_module = "", recv_key = "host_compute_channel_0_retvals", send_key = "host_compute_channel_0_args"}> : (tensor<2xf32>) -> ()
    %1 = "tf._XlaHostComputeMlir"() <{host_mlir_module = "", recv_key = "host_compute_channel_1_retvals", send_key = "host_compute_channel_1_args"}> : () -> tensor<2xf32>
    %2 = "tf.Mul"(%1, %cst) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
    return %2 : tensor<2xf32>
  }
}
