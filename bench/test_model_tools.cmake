# CTest for make bench's model tools: a tiny random checkpoint of each family must load and run
# in `deepinfer score` (the engine's loader checks every name and shape), convert to a GGUF file
# with the v3 header, and a config of another architecture must be refused by name; a tiny
# Qwen3-MoE's --router-skew and its GGUF.
# Run: cmake -DTOOLS_DIR=<build>/bin -DWORK_DIR=<scratch> -P bench/test_model_tools.cmake
foreach(var TOOLS_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "pass -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(arch_llama LlamaForCausalLM)
set(arch_mistral MistralForCausalLM)
set(arch_qwen2 Qwen2ForCausalLM)
set(arch_qwen3 Qwen3ForCausalLM)
foreach(family llama mistral qwen2 qwen3)
  set(tied false)
  if(family STREQUAL "qwen3")
    set(tied true)
  endif()
  set(dir ${WORK_DIR}/${family})
  file(WRITE ${WORK_DIR}/${family}.json
       "{\"architectures\": [\"${arch_${family}}\"], \"model_type\": \"${family}\", \"vocab_size\": 300,
         \"hidden_size\": 48, \"intermediate_size\": 80, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,
         \"num_key_value_heads\": 2, \"head_dim\": 12, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6,
         \"rope_theta\": 10000.0, \"tie_word_embeddings\": ${tied}, \"eos_token_id\": 2,
         \"torch_dtype\": \"float32\"}")
  run_ok(${TOOLS_DIR}/deepinfer-make-random-model --config ${WORK_DIR}/${family}.json --out ${dir} --seed 3)
  run_ok(${TOOLS_DIR}/deepinfer score --model ${dir} --tokens 5,17,250 --top-logprobs 2)
  string(REGEX MATCHALL "\"pos\":" positions "${run_output}")
  list(LENGTH positions num_positions)
  if(NOT num_positions EQUAL 3)
    message(FATAL_ERROR "${family}: deepinfer score printed ${num_positions} positions, expected 3:\n${run_output}")
  endif()
  run_ok(${TOOLS_DIR}/deepinfer-hf-to-gguf --model ${dir} --out ${dir}.gguf)
  file(READ ${dir}.gguf header LIMIT 8 HEX)
  if(NOT header STREQUAL "4747554603000000")
    message(FATAL_ERROR "${family}: ${dir}.gguf starts with ${header}, expected GGUF magic and version 3")
  endif()
endforeach()

# --router-skew on a tiny Qwen3-MoE (40 experts, top 4): refused without a selection bias; with
# topk_method noaux_tc the prompt's tokens, routed by the engine (deepinfer bench's CPU line), put
# about the asked half on each layer's busiest tenth of the experts, against near even without.
set(moe_config "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", \"vocab_size\": 300,
  \"hidden_size\": 64, \"intermediate_size\": 96, \"moe_intermediate_size\": 32, \"num_hidden_layers\": 2,
  \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, \"num_experts\": 40,
  \"num_experts_per_tok\": 4, \"norm_topk_prob\": true, \"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-6,
  \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"eos_token_id\": 2, \"torch_dtype\": \"float32\"")
file(WRITE ${WORK_DIR}/moe_even.json "${moe_config}}")
file(WRITE ${WORK_DIR}/moe_skew.json "${moe_config}, \"topk_method\": \"noaux_tc\", \"n_group\": 1, \"topk_group\": 1}")
execute_process(COMMAND ${TOOLS_DIR}/deepinfer-make-random-model --config ${WORK_DIR}/moe_even.json
                        --out ${WORK_DIR}/moe_refused --router-skew 0.5
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "topk_method")
  message(FATAL_ERROR "--router-skew without a selection bias should be refused naming topk_method, got exit ${rc}: ${err}")
endif()
foreach(variant even skew)
  set(skew_flags)
  if(variant STREQUAL "skew")
    set(skew_flags --router-skew 0.5)
  endif()
  run_ok(${TOOLS_DIR}/deepinfer-make-random-model --config ${WORK_DIR}/moe_${variant}.json --out ${WORK_DIR}/moe_${variant}
         --seed 5 ${skew_flags})
  run_ok(${TOOLS_DIR}/deepinfer bench --model ${WORK_DIR}/moe_${variant} --prompt-tokens 1024 --decode-tokens 1 --repeats 1)
  if(NOT run_output MATCHES "\"busiest_tenth_expert_share\":([0-9.]+)")
    message(FATAL_ERROR "moe_${variant}: no busiest_tenth_expert_share in deepinfer bench's line:\n${run_output}")
  endif()
  set(share_${variant} ${CMAKE_MATCH_1})
endforeach()
if(share_even GREATER 0.25 OR share_skew LESS 0.4 OR share_skew GREATER 0.6)
  message(FATAL_ERROR "busiest tenth's share: ${share_even} without the skew (want < 0.25), ${share_skew} with "
                      "--router-skew 0.5 (want 0.4-0.6)")
endif()
# Its GGUF (llama.cpp's qwen3moe): each layer's 40 experts stacked into one tensor per projection, so
# 3 + 2 x 12 tensors (bench/node/check_gguf.mjs compares llama.cpp's logprobs with deepinfer's).
run_ok(${TOOLS_DIR}/deepinfer-hf-to-gguf --model ${WORK_DIR}/moe_even --out ${WORK_DIR}/moe_even.gguf)
file(READ ${WORK_DIR}/moe_even.gguf header LIMIT 16 HEX)
if(NOT header STREQUAL "47475546030000001b00000000000000")
  message(FATAL_ERROR "moe_even.gguf starts with ${header}, expected GGUF v3 with 27 (0x1b) tensors")
endif()
# --dtype: the bf16 checkpoint's matrices converted while written, f16 about half of f32.
foreach(dtype f16 f32)
  run_ok(${TOOLS_DIR}/deepinfer-hf-to-gguf --model ${WORK_DIR}/moe_even --out ${WORK_DIR}/moe_even_${dtype}.gguf
         --dtype ${dtype})
endforeach()
file(SIZE ${WORK_DIR}/moe_even_f32.gguf f32_bytes)
file(SIZE ${WORK_DIR}/moe_even_f16.gguf f16_bytes)
math(EXPR low "${f32_bytes} * 45 / 100")
math(EXPR high "${f32_bytes} * 55 / 100")
if(f16_bytes LESS low OR f16_bytes GREATER high)
  message(FATAL_ERROR "--dtype f16 wrote ${f16_bytes} bytes for a ${f32_bytes}-byte float32 GGUF")
endif()

file(WRITE ${WORK_DIR}/gpt2.json "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\",
  \"vocab_size\": 300, \"hidden_size\": 48, \"intermediate_size\": 80, \"num_hidden_layers\": 2,
  \"num_attention_heads\": 4, \"max_position_embeddings\": 128}")
execute_process(COMMAND ${TOOLS_DIR}/deepinfer-make-random-model --config ${WORK_DIR}/gpt2.json --out ${WORK_DIR}/gpt2
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "unsupported architecture 'GPT2LMHeadModel'")
  message(FATAL_ERROR "a GPT-2 config should be refused by name, got exit ${rc}: ${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
