# The layers_enforced test (tests/CMakeLists.txt): builds the probes of
# tests/layers/ in the build tree. Each is one source compiled with one
# layer's include roots and usage requirements, as that layer's own sources
# are. The control (a models source including nn and core) must build; the
# upward ones (core including the CUDA backend, nn including a model) must
# fail, for the missing header and nothing else.
#   cmake -DBUILD_DIR=<build tree> -P check_layers.cmake
function(build_probe target result output)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${target}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(${result} ${rc} PARENT_SCOPE)
  set(${output} "${out}" PARENT_SCOPE)
endfunction()

build_probe(layers_probe_models_includes_nn rc out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the control probe (models including nn and core) did not build:\n${out}")
endif()
foreach(pair "layers_probe_core_includes_cuda|kernels/cuda/runtime.h"
             "layers_probe_nn_includes_models|models/dit.h")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 target)
  list(GET pair 1 header)
  build_probe(${target} rc out)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${target} built: a lower layer included ${header}, so the layers are "
                        "not enforced")
  endif()
  string(REPLACE "." "\\." header_re "${header}")
  if(NOT out MATCHES "${header_re}(: No such file|' file not found)")
    message(FATAL_ERROR "${target} failed, but not for the missing ${header}:\n${out}")
  endif()
  message(STATUS "${target}: ${header} not found, as it must not be")
endforeach()
