// The subcommands of the deepinfer CLI; each takes argv starting at the subcommand's name and
// returns the process exit code. Errors go to stderr.
#pragma once

namespace deepinfer::cli {

int run_generate(int argc, char** argv);
int run_score(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_prompt(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_detokenize(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_bench_serve(int argc, char** argv);
int run_bench_images(int argc, char** argv);
int run_lb_sim(int argc, char** argv);
int run_router(int argc, char** argv);

}  // namespace deepinfer::cli
