// DeviceError: a backend failure, and whether the device survived it. The engine fails the
// requests a failed step was running; a lost device ends serving (the server's /health says why).
#pragma once

#include <stdexcept>
#include <string>

namespace deepinfer {

class DeviceError : public std::runtime_error {
 public:
  // lost: the device can run nothing more in this process (a CUDA error that poisons the
  // context: an illegal address, a device-side assert, an uncorrectable ECC error). Otherwise only
  // this operation failed (out of device memory, a bad launch) and later ones may succeed.
  DeviceError(const std::string& message, bool lost) : std::runtime_error(message), lost_(lost) {}
  bool lost() const { return lost_; }

 private:
  bool lost_;
};

// Whether e is a DeviceError that lost the device.
inline bool loses_device(const std::exception& e) {
  const auto* device = dynamic_cast<const DeviceError*>(&e);
  return device != nullptr && device->lost();
}

}  // namespace deepinfer
