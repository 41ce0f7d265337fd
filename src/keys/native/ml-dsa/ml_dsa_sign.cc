// signMu(level, secretKey, mu[, options]) -> Buffer: pure ML-DSA (FIPS 204) over an externally computed μ, signed
// by the OpenSSL that the running Node carries (3.5+: OSSL_SIGNATURE_PARAM_MU). node:crypto signs messages only;
// KMS's EXTERNAL_MU hands us μ. The OpenSSL symbols are left undefined here and bound, at load time (-z now), to
// the node executable's own exports, never to a system libcrypto: on a Node whose OpenSSL lacks them (Node 20 has
// 3.0) the load fails and the caller falls back to @noble/post-quantum.
// The key is the expanded secret key (skEncode), imported for one signature and freed (OpenSSL zeroes it).
#include <napi.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstring>
#include <memory>
#include <string>

namespace {

constexpr size_t kMuBytes = 64;
constexpr size_t kRndBytes = 32;

struct Level {
  int level;
  const char *name;
  size_t secretKeyBytes;
  size_t signatureBytes;
};

constexpr Level kLevels[] = {
    {44, "ML-DSA-44", 2560, 2420},
    {65, "ML-DSA-65", 4032, 3309},
    {87, "ML-DSA-87", 4896, 4627},
};

const Level *FindLevel(int level) {
  for (const Level &l : kLevels)
    if (l.level == level) return &l;
  return nullptr;
}

struct PkeyFree {
  void operator()(EVP_PKEY *p) const { EVP_PKEY_free(p); }
};
struct CtxFree {
  void operator()(EVP_PKEY_CTX *p) const { EVP_PKEY_CTX_free(p); }
};
struct SigFree {
  void operator()(EVP_SIGNATURE *p) const { EVP_SIGNATURE_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Ctx = std::unique_ptr<EVP_PKEY_CTX, CtxFree>;
using Signature = std::unique_ptr<EVP_SIGNATURE, SigFree>;

// What OpenSSL said, for the error message (its queue is per thread, so this reads only our own failure).
std::string OpenSslReason(const char *step) {
  std::string out = std::string("OpenSSL ") + step + " failed";
  unsigned long code = ERR_get_error();
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    out += ": ";
    out += buf;
  }
  ERR_clear_error();
  return out;
}

Napi::Value Fail(Napi::Env env, const std::string &message) {
  Napi::Error::New(env, message).ThrowAsJavaScriptException();
  return env.Undefined();
}

Napi::Value Refuse(Napi::Env env, const std::string &message) {
  Napi::RangeError::New(env, message).ThrowAsJavaScriptException();
  return env.Undefined();
}

Pkey ImportSecretKey(const Level &level, const uint8_t *secret, size_t length) {
  Ctx ctx(EVP_PKEY_CTX_new_from_name(nullptr, level.name, nullptr));
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) <= 0) return nullptr;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PRIV_KEY, const_cast<uint8_t *>(secret), length),
      OSSL_PARAM_construct_end(),
  };
  EVP_PKEY *pkey = nullptr;
  if (EVP_PKEY_fromdata(ctx.get(), &pkey, EVP_PKEY_KEYPAIR, params) <= 0) return nullptr;
  return Pkey(pkey);
}

Napi::Value SignMu(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsTypedArray() || !info[2].IsTypedArray()) {
    Napi::TypeError::New(env, "signMu(level: 44 | 65 | 87, secretKey: Uint8Array, mu: Uint8Array, options?)")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const Level *level = FindLevel(info[0].As<Napi::Number>().Int32Value());
  if (!level) return Refuse(env, "signMu: the level is 44, 65 or 87");
  auto secret = info[1].As<Napi::Uint8Array>();
  auto mu = info[2].As<Napi::Uint8Array>();
  if (secret.ByteLength() != level->secretKeyBytes) {
    return Refuse(env, std::string("signMu: an ") + level->name + " secret key is " +
                           std::to_string(level->secretKeyBytes) + " bytes, not " +
                           std::to_string(secret.ByteLength()));
  }
  if (mu.ByteLength() != kMuBytes) {
    return Refuse(env, "signMu: mu is 64 bytes, not " + std::to_string(mu.ByteLength()));
  }

  // Hedged by default, as FIPS 204 recommends; `deterministic` signs with rnd = 0, `testEntropy` with a given rnd
  // (both for tests that compare against another implementation byte for byte).
  int deterministic = 0;
  std::string entropy;
  if (info.Length() > 3 && info[3].IsObject()) {
    Napi::Object options = info[3].As<Napi::Object>();
    deterministic = options.Get("deterministic").ToBoolean().Value() ? 1 : 0;
    Napi::Value given = options.Get("testEntropy");
    if (given.IsTypedArray()) {
      auto bytes = given.As<Napi::Uint8Array>();
      if (bytes.ByteLength() != kRndBytes) return Refuse(env, "signMu: testEntropy is 32 bytes");
      entropy.assign(reinterpret_cast<const char *>(bytes.Data()), bytes.ByteLength());
    }
  }

  Pkey pkey = ImportSecretKey(*level, secret.Data(), secret.ByteLength());
  if (!pkey) return Fail(env, OpenSslReason("importing the secret key"));
  Signature algorithm(EVP_SIGNATURE_fetch(nullptr, level->name, nullptr));
  if (!algorithm) return Fail(env, OpenSslReason("fetching the signature algorithm"));
  Ctx ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey.get(), nullptr));
  if (!ctx) return Fail(env, OpenSslReason("creating the signing context"));

  int useMu = 1;
  OSSL_PARAM params[4];
  size_t n = 0;
  params[n++] = OSSL_PARAM_construct_int(OSSL_SIGNATURE_PARAM_MU, &useMu);
  params[n++] = OSSL_PARAM_construct_int(OSSL_SIGNATURE_PARAM_DETERMINISTIC, &deterministic);
  if (!entropy.empty()) {
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_SIGNATURE_PARAM_TEST_ENTROPY, entropy.data(), entropy.size());
  }
  params[n] = OSSL_PARAM_construct_end();
  if (EVP_PKEY_sign_message_init(ctx.get(), algorithm.get(), params) <= 0) {
    return Fail(env, OpenSslReason("starting the signature"));
  }

  Napi::Buffer<uint8_t> out = Napi::Buffer<uint8_t>::New(env, level->signatureBytes);
  size_t length = out.Length();
  if (EVP_PKEY_sign(ctx.get(), out.Data(), &length, mu.Data(), mu.ByteLength()) <= 0) {
    return Fail(env, OpenSslReason("signing"));
  }
  if (length != level->signatureBytes) return Fail(env, "signMu: OpenSSL returned a signature of the wrong length");
  return out;
}

// Which OpenSSL signs, and whether it has ML-DSA at all (a Node built against a trimmed OpenSSL may not).
Napi::Value Describe(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("openssl", Napi::String::New(env, OpenSSL_version(OPENSSL_VERSION)));
  Signature probe(EVP_SIGNATURE_fetch(nullptr, "ML-DSA-65", nullptr));
  ERR_clear_error();
  out.Set("mlDsa", Napi::Boolean::New(env, probe != nullptr));
  return out;
}

napi_value Call(napi_env env, napi_callback_info info, Napi::Value (*fn)(const Napi::CallbackInfo &)) {
  Napi::CallbackInfo cb(env, info);
  return fn(cb);
}

napi_value SignMuEntry(napi_env env, napi_callback_info info) { return Call(env, info, SignMu); }
napi_value DescribeEntry(napi_env env, napi_callback_info info) { return Call(env, info, Describe); }

}  // namespace

// Plain Node-API, never throwing: a signing thread may be terminated while it loads this addon, and then every call
// into JavaScript fails; node-addon-api answers a failed throw with a fatal error that ends the whole process.
// Failing quietly here makes require() fail, and the caller falls back to noble.
extern "C" napi_value ml_dsa_sign_init(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "signMu", NAPI_AUTO_LENGTH, SignMuEntry, nullptr, &fn) != napi_ok) return nullptr;
  if (napi_set_named_property(env, exports, "signMu", fn) != napi_ok) return nullptr;
  if (napi_create_function(env, "describe", NAPI_AUTO_LENGTH, DescribeEntry, nullptr, &fn) != napi_ok) return nullptr;
  if (napi_set_named_property(env, exports, "describe", fn) != napi_ok) return nullptr;
  return exports;
}

NAPI_MODULE(ml_dsa_sign, ml_dsa_sign_init)
