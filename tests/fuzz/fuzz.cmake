# Builds the libFuzzer targets (tests/fuzz/CMakeLists.txt) with clang-14 (an external project: the main
# build uses g++) and runs each for DEEPINFER_FUZZ_SECONDS (default 10) as a ctest entry, from its
# seed corpus in tests/fuzz/corpus/ and with its dictionary. Included by tests/CMakeLists.txt.
option(DEEPINFER_FUZZ "Build the libFuzzer targets and run each briefly in ctest (needs clang)" ON)
if(NOT DEEPINFER_FUZZ)
  return()
endif()
find_program(DEEPINFER_FUZZ_CXX NAMES clang++-14 clang++)
if(NOT DEEPINFER_FUZZ_CXX)
  message(STATUS "fuzz: clang++ not found, fuzzers not built (tools/install_deps.sh installs clang-14)")
  return()
endif()
include(ExternalProject)
set(fuzz_binary_dir ${CMAKE_BINARY_DIR}/fuzz)
set(fuzz_launcher)
if(DEEPINFER_CCACHE)
  set(fuzz_launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${DEEPINFER_CCACHE})
endif()
ExternalProject_Add(fuzzers
  SOURCE_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz
  BINARY_DIR ${fuzz_binary_dir}
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${DEEPINFER_FUZZ_CXX} -DCMAKE_BUILD_TYPE=RelWithDebInfo ${fuzz_launcher}
  BUILD_ALWAYS ON
  INSTALL_COMMAND "")

# deepinfer_add_fuzz_test(FUZZER LABEL [DICT]): one ctest entry running FUZZER briefly.
function(deepinfer_add_fuzz_test fuzzer label)
  set(dict)
  if(ARGC GREATER 2)
    set(dict ${PROJECT_SOURCE_DIR}/tests/fuzz/${ARGV2})
  endif()
  add_test(NAME ${fuzzer} COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzer.sh ${fuzz_binary_dir}/${fuzzer} ${dict})
  set_tests_properties(${fuzzer} PROPERTIES LABELS "${label};fuzz" TIMEOUT 900)
endfunction()

foreach(fuzzer fuzz_encode fuzz_detokenize)
  deepinfer_add_fuzz_test(${fuzzer} tokenizer)
endforeach()
foreach(fuzzer fuzz_grammar_ebnf fuzz_grammar_regex)
  deepinfer_add_fuzz_test(${fuzzer} grammar)
endforeach()
foreach(fuzzer fuzz_api_chat_completions fuzz_api_completions fuzz_api_responses fuzz_api_messages)
  deepinfer_add_fuzz_test(${fuzzer} recipe api_request.dict)
endforeach()
deepinfer_add_fuzz_test(fuzz_safetensors weights safetensors.dict)
deepinfer_add_fuzz_test(fuzz_hf_config weights hf_config.dict)
deepinfer_add_fuzz_test(fuzz_image_decode image)
