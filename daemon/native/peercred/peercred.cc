// getPeerCred(fd) -> { pid, uid, gid } for a connected AF_UNIX socket (Linux SO_PEERCRED).
// The kernel records the credentials at connect() time, so they cannot be forged by the peer.
// Errors are thrown as JS errors with `code` (errno name) and `syscall`, so the TypeScript side can log them.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <napi.h>

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/types.h>

namespace {

Napi::Value ThrowErrno(Napi::Env env, int err, const char *syscall) {
  Napi::Error error = Napi::Error::New(env, std::string(syscall) + ": " + std::strerror(err));
  error.Set("errno", Napi::Number::New(env, err));
  error.Set("syscall", Napi::String::New(env, syscall));
  error.ThrowAsJavaScriptException();
  return env.Undefined();
}

Napi::Value GetPeerCred(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) {
    Napi::TypeError::New(env, "getPeerCred(fd: number)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const int fd = info[0].As<Napi::Number>().Int32Value();
  if (fd < 0) {
    Napi::RangeError::New(env, "getPeerCred: fd must be >= 0").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  struct ucred cred;
  std::memset(&cred, 0, sizeof cred);
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return ThrowErrno(env, errno, "getsockopt");
  if (len != sizeof cred) return ThrowErrno(env, EINVAL, "getsockopt");
  Napi::Object out = Napi::Object::New(env);
  out.Set("pid", Napi::Number::New(env, cred.pid));
  out.Set("uid", Napi::Number::New(env, cred.uid));
  out.Set("gid", Napi::Number::New(env, cred.gid));
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("getPeerCred", Napi::Function::New(env, GetPeerCred, "getPeerCred"));
  return exports;
}

}  // namespace

NODE_API_MODULE(peercred, Init)
