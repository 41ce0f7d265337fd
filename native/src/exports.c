/* The exported surface: C_GetFunctionList, C_GetInterfaceList and C_GetInterface (exports.map hides the rest).
 * Each entry of the function lists is one line into module*.c (module.h), as in SoftHSM's main.cpp. */
#include <string.h>

#include "module.h"

#define EXPORT __attribute__((visibility("default")))
#define NS CKR_FUNCTION_NOT_SUPPORTED
typedef CK_SESSION_HANDLE SH;
typedef CK_OBJECT_HANDLE OH;

static CK_RV f_Initialize(CK_VOID_PTR a) { return sbp11_initialize(a); }
static CK_RV f_Finalize(CK_VOID_PTR r) { return sbp11_finalize(r); }
static CK_RV f_GetInfo(CK_INFO_PTR i) { return sbp11_get_info(i, 3, 0); }
static CK_RV f_GetInfo240(CK_INFO_PTR i) { return sbp11_get_info(i, 2, 40); }
static CK_RV f_GetSlotList(CK_BBOOL p, CK_SLOT_ID_PTR l, CK_ULONG_PTR c) { return sbp11_get_slot_list(p, l, c); }
static CK_RV f_GetSlotInfo(CK_SLOT_ID s, CK_SLOT_INFO_PTR i) { return sbp11_get_slot_info(s, i); }
static CK_RV f_GetTokenInfo(CK_SLOT_ID s, CK_TOKEN_INFO_PTR i) { return sbp11_get_token_info(s, i); }
static CK_RV f_WaitForSlotEvent(CK_FLAGS f, CK_SLOT_ID_PTR s, CK_VOID_PTR r) {
  (void)f, (void)s, (void)r;
  return sbp11_unsupported(NS);
}
static CK_RV f_GetMechanismList(CK_SLOT_ID s, CK_MECHANISM_TYPE_PTR l, CK_ULONG_PTR c) {
  return sbp11_get_mechanism_list(s, l, c);
}
static CK_RV f_GetMechanismInfo(CK_SLOT_ID s, CK_MECHANISM_TYPE t, CK_MECHANISM_INFO_PTR i) {
  return sbp11_get_mechanism_info(s, t, i);
}
static CK_RV f_InitToken(CK_SLOT_ID s, CK_UTF8CHAR_PTR p, CK_ULONG l, CK_UTF8CHAR_PTR b) {
  (void)s, (void)p, (void)l, (void)b;
  return sbp11_unsupported(NS);
}
static CK_RV f_InitPIN(SH h, CK_UTF8CHAR_PTR p, CK_ULONG l) {
  (void)p, (void)l;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_SetPIN(SH h, CK_UTF8CHAR_PTR o, CK_ULONG ol, CK_UTF8CHAR_PTR n, CK_ULONG nl) {
  (void)o, (void)ol, (void)n, (void)nl;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_OpenSession(CK_SLOT_ID s, CK_FLAGS f, CK_VOID_PTR a, CK_NOTIFY n, CK_SESSION_HANDLE_PTR h) {
  (void)a, (void)n;
  return sbp11_open_session(s, f, h);
}
static CK_RV f_CloseSession(SH h) { return sbp11_close_session(h); }
static CK_RV f_CloseAllSessions(CK_SLOT_ID s) { return sbp11_close_all_sessions(s); }
static CK_RV f_GetSessionInfo(SH h, CK_SESSION_INFO_PTR i) { return sbp11_get_session_info(h, i); }
static CK_RV f_GetOperationState(SH h, CK_BYTE_PTR s, CK_ULONG_PTR l) { return sbp11_get_operation_state(h, s, l); }
static CK_RV f_SetOperationState(SH h, CK_BYTE_PTR s, CK_ULONG l, OH e, OH a) {
  return sbp11_set_operation_state(h, s, l, e, a);
}
static CK_RV f_Login(SH h, CK_USER_TYPE u, CK_UTF8CHAR_PTR p, CK_ULONG l) { return sbp11_login(h, u, p, l); }
static CK_RV f_Logout(SH h) { return sbp11_logout(h); }
static CK_RV f_CreateObject(SH h, CK_ATTRIBUTE_PTR t, CK_ULONG c, CK_OBJECT_HANDLE_PTR o) {
  (void)t, (void)c, (void)o;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_CopyObject(SH h, OH o, CK_ATTRIBUTE_PTR t, CK_ULONG c, CK_OBJECT_HANDLE_PTR n) {
  (void)t, (void)c, (void)n;
  return sbp11_object_prohibited(h, o);
}
static CK_RV f_DestroyObject(SH h, OH o) { return sbp11_object_prohibited(h, o); }
static CK_RV f_GetObjectSize(SH h, OH o, CK_ULONG_PTR s) { return sbp11_get_object_size(h, o, s); }
static CK_RV f_GetAttributeValue(SH h, OH o, CK_ATTRIBUTE_PTR t, CK_ULONG c) {
  return sbp11_get_attribute_value(h, o, t, c);
}
static CK_RV f_SetAttributeValue(SH h, OH o, CK_ATTRIBUTE_PTR t, CK_ULONG c) {
  (void)t, (void)c;
  return sbp11_object_prohibited(h, o);
}
static CK_RV f_FindObjectsInit(SH h, CK_ATTRIBUTE_PTR t, CK_ULONG c) { return sbp11_find_objects_init(h, t, c); }
static CK_RV f_FindObjects(SH h, CK_OBJECT_HANDLE_PTR o, CK_ULONG m, CK_ULONG_PTR c) {
  return sbp11_find_objects(h, o, m, c);
}
static CK_RV f_FindObjectsFinal(SH h) { return sbp11_find_objects_final(h); }

/* Encrypt, decrypt, verify, key management: not offered. */
static CK_RV f_MechKeyInit(SH h, CK_MECHANISM_PTR m, OH k) {
  (void)m, (void)k;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_InOut(SH h, CK_BYTE_PTR i, CK_ULONG il, CK_BYTE_PTR o, CK_ULONG_PTR ol) {
  (void)i, (void)il, (void)o, (void)ol;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_Out(SH h, CK_BYTE_PTR o, CK_ULONG_PTR ol) {
  (void)o, (void)ol;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_In(SH h, CK_BYTE_PTR i, CK_ULONG il) {
  (void)i, (void)il;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_DigestInit(SH h, CK_MECHANISM_PTR m) { return sbp11_digest_init(h, m); }
static CK_RV f_Digest(SH h, CK_BYTE_PTR d, CK_ULONG dl, CK_BYTE_PTR o, CK_ULONG_PTR ol) {
  return sbp11_digest(h, d, dl, o, ol);
}
static CK_RV f_DigestUpdate(SH h, CK_BYTE_PTR p, CK_ULONG l) { return sbp11_digest_update(h, p, l); }
static CK_RV f_DigestKey(SH h, OH k) { return sbp11_digest_key(h, k); }
static CK_RV f_DigestFinal(SH h, CK_BYTE_PTR o, CK_ULONG_PTR ol) { return sbp11_digest_final(h, o, ol); }
static CK_RV f_InIn(SH h, CK_BYTE_PTR a, CK_ULONG al, CK_BYTE_PTR b, CK_ULONG bl) {
  (void)a, (void)al, (void)b, (void)bl;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_GenerateKey(SH h, CK_MECHANISM_PTR m, CK_ATTRIBUTE_PTR t, CK_ULONG c, CK_OBJECT_HANDLE_PTR k) {
  (void)m, (void)t, (void)c, (void)k;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_GenerateKeyPair(SH h, CK_MECHANISM_PTR m, CK_ATTRIBUTE_PTR pt, CK_ULONG pc, CK_ATTRIBUTE_PTR st,
                               CK_ULONG sc, CK_OBJECT_HANDLE_PTR pk, CK_OBJECT_HANDLE_PTR sk) {
  (void)m, (void)pt, (void)pc, (void)st, (void)sc, (void)pk, (void)sk;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_WrapKey(SH h, CK_MECHANISM_PTR m, OH w, OH k, CK_BYTE_PTR o, CK_ULONG_PTR ol) {
  (void)m, (void)w, (void)k, (void)o, (void)ol;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_UnwrapKey(SH h, CK_MECHANISM_PTR m, OH u, CK_BYTE_PTR w, CK_ULONG wl, CK_ATTRIBUTE_PTR t,
                         CK_ULONG c, CK_OBJECT_HANDLE_PTR k) {
  (void)m, (void)u, (void)w, (void)wl, (void)t, (void)c, (void)k;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_DeriveKey(SH h, CK_MECHANISM_PTR m, OH b, CK_ATTRIBUTE_PTR t, CK_ULONG c, CK_OBJECT_HANDLE_PTR k) {
  (void)m, (void)b, (void)t, (void)c, (void)k;
  return sbp11_unsupported_session(h, NS);
}

static CK_RV f_SignInit(SH h, CK_MECHANISM_PTR m, OH k) { return sbp11_sign_init(h, m, k); }
static CK_RV f_Sign(SH h, CK_BYTE_PTR d, CK_ULONG dl, CK_BYTE_PTR s, CK_ULONG_PTR sl) {
  return sbp11_sign(h, d, dl, s, sl);
}
static CK_RV f_SignUpdate(SH h, CK_BYTE_PTR p, CK_ULONG l) { return sbp11_sign_update(h, p, l); }
static CK_RV f_SignFinal(SH h, CK_BYTE_PTR s, CK_ULONG_PTR sl) { return sbp11_sign_final(h, s, sl); }
static CK_RV f_SeedRandom(SH h, CK_BYTE_PTR s, CK_ULONG l) { return sbp11_seed_random(h, s, l); }
static CK_RV f_GenerateRandom(SH h, CK_BYTE_PTR r, CK_ULONG l) { return sbp11_generate_random(h, r, l); }
static CK_RV f_GetFunctionStatus(SH h) { return sbp11_unsupported_session(h, CKR_FUNCTION_NOT_PARALLEL); }
static CK_RV f_CancelFunction(SH h) { return sbp11_unsupported_session(h, CKR_FUNCTION_NOT_PARALLEL); }

/* PKCS#11 3.0 */
static CK_RV f_LoginUser(SH h, CK_USER_TYPE u, CK_UTF8CHAR_PTR p, CK_ULONG l, CK_UTF8CHAR_PTR n, CK_ULONG nl) {
  (void)n, (void)nl;
  return sbp11_login(h, u, p, l);
}
static CK_RV f_SessionCancel(SH h, CK_FLAGS f) { return sbp11_session_cancel(h, f); }
static CK_RV f_MessageInit(SH h, CK_MECHANISM_PTR m, OH k) {
  (void)m, (void)k;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_MessageFinal(SH h) { return sbp11_unsupported_session(h, NS); }
static CK_RV f_CryptMessage(SH h, CK_VOID_PTR p, CK_ULONG pl, CK_BYTE_PTR a, CK_ULONG al, CK_BYTE_PTR i,
                            CK_ULONG il, CK_BYTE_PTR o, CK_ULONG_PTR ol) {
  (void)p, (void)pl, (void)a, (void)al, (void)i, (void)il, (void)o, (void)ol;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_CryptMessageBegin(SH h, CK_VOID_PTR p, CK_ULONG pl, CK_BYTE_PTR a, CK_ULONG al) {
  (void)p, (void)pl, (void)a, (void)al;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_CryptMessageNext(SH h, CK_VOID_PTR p, CK_ULONG pl, CK_BYTE_PTR i, CK_ULONG il, CK_BYTE_PTR o,
                                CK_ULONG_PTR ol, CK_FLAGS f) {
  (void)p, (void)pl, (void)i, (void)il, (void)o, (void)ol, (void)f;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_SignMessage(SH h, CK_VOID_PTR p, CK_ULONG pl, CK_BYTE_PTR d, CK_ULONG dl, CK_BYTE_PTR s,
                           CK_ULONG_PTR sl) {
  (void)p, (void)pl, (void)d, (void)dl, (void)s, (void)sl;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_MessageBegin(SH h, CK_VOID_PTR p, CK_ULONG pl) {
  (void)p, (void)pl;
  return sbp11_unsupported_session(h, NS);
}
static CK_RV f_VerifyMessage(SH h, CK_VOID_PTR p, CK_ULONG pl, CK_BYTE_PTR d, CK_ULONG dl, CK_BYTE_PTR s,
                             CK_ULONG sl) {
  (void)p, (void)pl, (void)d, (void)dl, (void)s, (void)sl;
  return sbp11_unsupported_session(h, NS);
}

static CK_RV f_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR ppFunctionList);

#define COMMON_2_40(getinfo)                                                                                     \
  .C_Initialize = f_Initialize, .C_Finalize = f_Finalize, .C_GetInfo = getinfo,                                  \
  .C_GetFunctionList = f_GetFunctionList, .C_GetSlotList = f_GetSlotList, .C_GetSlotInfo = f_GetSlotInfo,        \
  .C_GetTokenInfo = f_GetTokenInfo, .C_GetMechanismList = f_GetMechanismList,                                    \
  .C_GetMechanismInfo = f_GetMechanismInfo, .C_InitToken = f_InitToken, .C_InitPIN = f_InitPIN,                  \
  .C_SetPIN = f_SetPIN, .C_OpenSession = f_OpenSession, .C_CloseSession = f_CloseSession,                        \
  .C_CloseAllSessions = f_CloseAllSessions, .C_GetSessionInfo = f_GetSessionInfo,                                \
  .C_GetOperationState = f_GetOperationState, .C_SetOperationState = f_SetOperationState, .C_Login = f_Login,    \
  .C_Logout = f_Logout, .C_CreateObject = f_CreateObject, .C_CopyObject = f_CopyObject,                          \
  .C_DestroyObject = f_DestroyObject, .C_GetObjectSize = f_GetObjectSize,                                        \
  .C_GetAttributeValue = f_GetAttributeValue, .C_SetAttributeValue = f_SetAttributeValue,                        \
  .C_FindObjectsInit = f_FindObjectsInit, .C_FindObjects = f_FindObjects,                                        \
  .C_FindObjectsFinal = f_FindObjectsFinal, .C_EncryptInit = f_MechKeyInit, .C_Encrypt = f_InOut,                \
  .C_EncryptUpdate = f_InOut, .C_EncryptFinal = f_Out, .C_DecryptInit = f_MechKeyInit, .C_Decrypt = f_InOut,     \
  .C_DecryptUpdate = f_InOut, .C_DecryptFinal = f_Out, .C_DigestInit = f_DigestInit, .C_Digest = f_Digest,       \
  .C_DigestUpdate = f_DigestUpdate, .C_DigestKey = f_DigestKey, .C_DigestFinal = f_DigestFinal, .C_SignInit = f_SignInit,          \
  .C_Sign = f_Sign, .C_SignUpdate = f_SignUpdate, .C_SignFinal = f_SignFinal,                                    \
  .C_SignRecoverInit = f_MechKeyInit, .C_SignRecover = f_InOut, .C_VerifyInit = f_MechKeyInit,                   \
  .C_Verify = f_InIn, .C_VerifyUpdate = f_In, .C_VerifyFinal = f_In, .C_VerifyRecoverInit = f_MechKeyInit,       \
  .C_VerifyRecover = f_InOut, .C_DigestEncryptUpdate = f_InOut, .C_DecryptDigestUpdate = f_InOut,                \
  .C_SignEncryptUpdate = f_InOut, .C_DecryptVerifyUpdate = f_InOut, .C_GenerateKey = f_GenerateKey,              \
  .C_GenerateKeyPair = f_GenerateKeyPair, .C_WrapKey = f_WrapKey, .C_UnwrapKey = f_UnwrapKey,                    \
  .C_DeriveKey = f_DeriveKey, .C_SeedRandom = f_SeedRandom, .C_GenerateRandom = f_GenerateRandom,                \
  .C_GetFunctionStatus = f_GetFunctionStatus, .C_CancelFunction = f_CancelFunction,                              \
  .C_WaitForSlotEvent = f_WaitForSlotEvent

static CK_FUNCTION_LIST functions_2_40 = {.version = {2, 40}, COMMON_2_40(f_GetInfo240)};

static CK_RV f_GetInterfaceList(CK_INTERFACE_PTR l, CK_ULONG_PTR c);
static CK_RV f_GetInterface(CK_UTF8CHAR_PTR n, CK_VERSION_PTR v, CK_INTERFACE_PTR_PTR i, CK_FLAGS f);

static CK_FUNCTION_LIST_3_0 functions_3_0 = {
    .version = {3, 0},
    COMMON_2_40(f_GetInfo),
    .C_GetInterfaceList = f_GetInterfaceList,
    .C_GetInterface = f_GetInterface,
    .C_LoginUser = f_LoginUser,
    .C_SessionCancel = f_SessionCancel,
    .C_MessageEncryptInit = f_MessageInit,
    .C_EncryptMessage = f_CryptMessage,
    .C_EncryptMessageBegin = f_CryptMessageBegin,
    .C_EncryptMessageNext = f_CryptMessageNext,
    .C_MessageEncryptFinal = f_MessageFinal,
    .C_MessageDecryptInit = f_MessageInit,
    .C_DecryptMessage = f_CryptMessage,
    .C_DecryptMessageBegin = f_CryptMessageBegin,
    .C_DecryptMessageNext = f_CryptMessageNext,
    .C_MessageDecryptFinal = f_MessageFinal,
    .C_MessageSignInit = f_MessageInit,
    .C_SignMessage = f_SignMessage,
    .C_SignMessageBegin = f_MessageBegin,
    .C_SignMessageNext = f_SignMessage,
    .C_MessageSignFinal = f_MessageFinal,
    .C_MessageVerifyInit = f_MessageInit,
    .C_VerifyMessage = f_VerifyMessage,
    .C_VerifyMessageBegin = f_MessageBegin,
    .C_VerifyMessageNext = f_VerifyMessage,
    .C_MessageVerifyFinal = f_MessageFinal,
};

static CK_CHAR interface_name[] = "PKCS 11";
static CK_INTERFACE interfaces[] = {
    {interface_name, &functions_3_0, 0},
    {interface_name, &functions_2_40, 0},
};
#define NINTERFACES (sizeof(interfaces) / sizeof(interfaces[0]))

static CK_RV f_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR ppFunctionList) {
  if (!ppFunctionList) return CKR_ARGUMENTS_BAD;
  *ppFunctionList = &functions_2_40;
  return CKR_OK;
}

static CK_RV f_GetInterfaceList(CK_INTERFACE_PTR pInterfacesList, CK_ULONG_PTR pulCount) {
  if (!pulCount) return CKR_ARGUMENTS_BAD;
  if (!pInterfacesList) {
    *pulCount = NINTERFACES;
    return CKR_OK;
  }
  if (*pulCount < NINTERFACES) {
    *pulCount = NINTERFACES;
    return CKR_BUFFER_TOO_SMALL;
  }
  memcpy(pInterfacesList, interfaces, sizeof(interfaces));
  *pulCount = NINTERFACES;
  return CKR_OK;
}

static CK_RV f_GetInterface(CK_UTF8CHAR_PTR pInterfaceName, CK_VERSION_PTR pVersion,
                            CK_INTERFACE_PTR_PTR ppInterface, CK_FLAGS flags) {
  if (!ppInterface) return CKR_ARGUMENTS_BAD;
  for (size_t i = 0; i < NINTERFACES; i++) {
    const CK_VERSION *v = (const CK_VERSION *)interfaces[i].pFunctionList;
    if (pInterfaceName && strcmp((const char *)pInterfaceName, (const char *)interfaces[i].pInterfaceName) != 0)
      continue;
    if (pVersion && (pVersion->major != v->major || pVersion->minor != v->minor)) continue;
    if ((interfaces[i].flags & flags) != flags) continue;
    *ppInterface = &interfaces[i]; /* the first match: 3.0 unless 2.40 is asked for */
    return CKR_OK;
  }
  return CKR_ARGUMENTS_BAD;
}

EXPORT CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR ppFunctionList) { return f_GetFunctionList(ppFunctionList); }
EXPORT CK_RV C_GetInterfaceList(CK_INTERFACE_PTR pInterfacesList, CK_ULONG_PTR pulCount) {
  return f_GetInterfaceList(pInterfacesList, pulCount);
}
EXPORT CK_RV C_GetInterface(CK_UTF8CHAR_PTR pInterfaceName, CK_VERSION_PTR pVersion, CK_INTERFACE_PTR_PTR ppInterface,
                            CK_FLAGS flags) {
  return f_GetInterface(pInterfaceName, pVersion, ppInterface, flags);
}
