# DeviceAllocatorAdapter (include/ptd/executorch/device_allocator_adapter.h):
# any ptd::Device as ExecuTorch's DeviceAllocator, and its test.
#
# Meant to be included by the CMake that defines ptd_executorch, after it
# does (runtime/executorch/CMakeLists.txt):
#   include(${CMAKE_CURRENT_SOURCE_DIR}/adapter.cmake)
# It needs ptd::device (the definition of Device::AllocateMany's default) and
# adds nothing while either target is missing. The test runs over a host-memory
# device, so it needs no GPU.
if(TARGET ptd_executorch AND TARGET ptd_device)
  target_sources(ptd_executorch PRIVATE ${CMAKE_CURRENT_LIST_DIR}/device_allocator_adapter.cc)
  target_link_libraries(ptd_executorch PUBLIC ptd_device)
  if(PTD_BUILD_TESTS)
    include(GoogleTest)
    add_executable(ptd_executorch_adapter_tests
      ${PROJECT_SOURCE_DIR}/tests/executorch/device_allocator_adapter_test.cc)
    target_compile_options(ptd_executorch_adapter_tests PRIVATE ${PTD_WARNINGS})
    target_include_directories(ptd_executorch_adapter_tests PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_libraries(ptd_executorch_adapter_tests PRIVATE ptd::executorch
                          GTest::gtest_main)
    gtest_discover_tests(ptd_executorch_adapter_tests DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS "executorch")
  endif()
endif()
