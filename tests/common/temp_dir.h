// A folder in the system temp directory for one test's files, removed with everything in it by
// the destructor.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace deepinfer::testing {

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("deepinfer_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_id_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the folder, written with `text`.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file) << text;
    return file;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int next_id_ = 0;
  std::filesystem::path path_;
};

}  // namespace deepinfer::testing
