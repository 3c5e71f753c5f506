// Result<T> and Error: the value-or-message type for everything a user or a file can get wrong.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace deepinfer {

// An error a user can act on: the message names what was wrong and what was expected.
struct Error {
  std::string message;
};

// Shaped like std::expected<T, Error> (not available in g++ 12).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}      // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

// Thrown at API boundaries that cannot return a Result (constructors, the CLI's top level).
class UserError : public std::exception {
 public:
  explicit UserError(std::string message) : message_(std::move(message)) {}
  explicit UserError(Error error) : message_(std::move(error.message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Returns the value or throws UserError with the message.
template <typename T>
T value_or_throw(Result<T> result) {
  if (!result.ok()) throw UserError(result.error());
  return std::move(result).value();
}

}  // namespace deepinfer

// Propagates an error from an expression returning Result<...>.
#define DI_TRY(expr)                                   \
  do {                                                 \
    auto di_try_result_ = (expr);                      \
    if (!di_try_result_.ok()) return di_try_result_.error(); \
  } while (0)

// Assigns a Result's value to target or returns its error from the enclosing function.
#define DI_ASSIGN(target, expr)                                    \
  do {                                                             \
    auto di_assign_result_ = (expr);                               \
    if (!di_assign_result_.ok()) return di_assign_result_.error(); \
    target = std::move(di_assign_result_).value();                 \
  } while (0)
