// Host vectors copied into a backend's memory: per-step input tables, load-time constants, the
// rows of an exchange.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace deepinfer {

// A buffer of count elements of T in backend's memory, at least one, so that an empty table
// still has an address to pass.
template <typename T>
DeviceBuffer allocate_elements(Backend& backend, int64_t count) {
  return backend.allocate(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T));
}

// A new buffer of backend's memory holding values.
template <typename T>
DeviceBuffer upload_vector(Backend& backend, const std::vector<T>& values) {
  DeviceBuffer buffer = allocate_elements<T>(backend, static_cast<int64_t>(values.size()));
  if (!values.empty()) backend.copy_to_device(buffer.data(), values.data(), values.size() * sizeof(T));
  return buffer;
}

}  // namespace deepinfer
