# The Python package's tests (label `python`): pytest over tests/python/*.py with the package built
# in <build>/python, one CTest test per file so they run in parallel. The CLI, the embedded model
# and the fixtures are their oracles and inputs (tests/python/conftest.py).
file(GLOB python_test_files CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/test_*.py)
foreach(test_file ${python_test_files})
  get_filename_component(name ${test_file} NAME_WE)
  add_test(NAME python_${name}
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${test_file}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_${name} PROPERTIES LABELS python TIMEOUT 300
                       ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;DEEPINFER_CLI=$<TARGET_FILE:deepinfer>;DEEPINFER_DEFAULT_MODEL=${PROJECT_SOURCE_DIR}/models/default;DEEPINFER_TEST_DATA_DIR=${DEEPINFER_TEST_DATA_DIR};DEEPINFER_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=1")
endforeach()
