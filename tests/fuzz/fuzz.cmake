# Builds the tokenizer and grammar fuzzers with clang-14 (an external project: the main build uses g++) and
# runs each for DEEPINFER_FUZZ_SECONDS (default 10) as a ctest entry. Included by tests/CMakeLists.txt.
find_program(DEEPINFER_FUZZ_CXX NAMES clang++-14 clang++)
if(NOT DEEPINFER_FUZZ_CXX)
  message(STATUS "fuzz: clang++ not found, tokenizer fuzzers not built (tools/install_deps.sh installs clang-14)")
  return()
endif()
include(ExternalProject)
set(fuzz_binary_dir ${CMAKE_BINARY_DIR}/fuzz)
ExternalProject_Add(tokenizer_fuzzers
  SOURCE_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz
  BINARY_DIR ${fuzz_binary_dir}
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${DEEPINFER_FUZZ_CXX} -DCMAKE_BUILD_TYPE=RelWithDebInfo
  BUILD_ALWAYS ON
  INSTALL_COMMAND "")
foreach(fuzzer fuzz_encode fuzz_detokenize)
  add_test(NAME tokenizer_${fuzzer}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzer.sh ${fuzz_binary_dir}/${fuzzer})
  set_tests_properties(tokenizer_${fuzzer} PROPERTIES LABELS "tokenizer;fuzz" TIMEOUT 900)
endforeach()
foreach(fuzzer fuzz_grammar_ebnf fuzz_grammar_regex)
  add_test(NAME ${fuzzer} COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzer.sh ${fuzz_binary_dir}/${fuzzer})
  set_tests_properties(${fuzzer} PROPERTIES LABELS "grammar;fuzz" TIMEOUT 900)
endforeach()
