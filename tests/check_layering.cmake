# Fails when a file in src/<layer>/ includes a header of a layer that is not below it
# (the one-way order of DESIGN.md). Run: cmake -DSOURCE_DIR=<repo> -P tests/check_layering.cmake
set(rank_core 0)
set(rank_kernels 1)
set(rank_weights 1)
set(rank_tokenizer 1)
set(rank_kvcache 1)
set(rank_image 1)  # image decoding and the vision processors' preprocessing: core only
set(rank_runtime 2)
set(rank_grammar 2)
set(rank_parallel 1)
set(rank_cluster 1)  # load-balancing policies and the cluster simulator: core only
set(rank_model 3)
set(rank_sampling 3)
set(rank_kvstore 3)
set(rank_engine 4)
set(rank_recipe 5)
set(rank_server 6)  # the server renders prompts through recipe/

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}/src ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cpp
     ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh)
set(violations "")
foreach(file ${files})
  string(REGEX MATCH "^[^/]+" layer ${file})
  if(NOT DEFINED rank_${layer})
    string(APPEND violations "\n  src/${file}: folder '${layer}' has no rank in tests/check_layering.cmake")
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/src/${file} includes REGEX "^#include \"[a-z_]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"([a-z_]+)/.*" "\\1" target ${line})
    if(NOT DEFINED rank_${target})
      continue()  # a third-party header with a folder, e.g. "nlohmann/json.hpp" spelled with quotes
    endif()
    if(NOT target STREQUAL layer AND NOT rank_${target} LESS rank_${layer})
      string(APPEND violations "\n  src/${file}: ${line} (layer '${layer}' may only use layers below it)")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "layering violations:${violations}")
endif()
list(LENGTH files num_files)
message(STATUS "layering: ${num_files} files follow the layer order")
