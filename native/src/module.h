/* The PKCS#11 functions this module implements (module.c and module_*.c, by function group); exports.c puts them
 * into the function lists. Each takes the global lock, works on the state, and leaves through one exit. */
#ifndef SBP11_MODULE_H
#define SBP11_MODULE_H

#include "sbp11_pkcs11.h"

CK_RV sbp11_initialize(CK_VOID_PTR pInitArgs);
CK_RV sbp11_finalize(CK_VOID_PTR pReserved);
CK_RV sbp11_get_info(CK_INFO_PTR pInfo, CK_BYTE major, CK_BYTE minor);
CK_RV sbp11_get_slot_list(CK_BBOOL tokenPresent, CK_SLOT_ID_PTR pSlotList, CK_ULONG_PTR pulCount);
CK_RV sbp11_get_slot_info(CK_SLOT_ID slotID, CK_SLOT_INFO_PTR pInfo);
CK_RV sbp11_get_token_info(CK_SLOT_ID slotID, CK_TOKEN_INFO_PTR pInfo);
CK_RV sbp11_get_mechanism_list(CK_SLOT_ID slotID, CK_MECHANISM_TYPE_PTR pList, CK_ULONG_PTR pulCount);
CK_RV sbp11_get_mechanism_info(CK_SLOT_ID slotID, CK_MECHANISM_TYPE type, CK_MECHANISM_INFO_PTR pInfo);
CK_RV sbp11_open_session(CK_SLOT_ID slotID, CK_FLAGS flags, CK_SESSION_HANDLE_PTR phSession);
CK_RV sbp11_close_session(CK_SESSION_HANDLE hSession);
CK_RV sbp11_close_all_sessions(CK_SLOT_ID slotID);
CK_RV sbp11_get_session_info(CK_SESSION_HANDLE hSession, CK_SESSION_INFO_PTR pInfo);
CK_RV sbp11_get_operation_state(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pState, CK_ULONG_PTR pulLen);
CK_RV sbp11_set_operation_state(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pState, CK_ULONG ulLen,
                                CK_OBJECT_HANDLE hEncryptionKey, CK_OBJECT_HANDLE hAuthenticationKey);
CK_RV sbp11_login(CK_SESSION_HANDLE hSession, CK_USER_TYPE userType, CK_UTF8CHAR_PTR pPin, CK_ULONG ulPinLen);
CK_RV sbp11_logout(CK_SESSION_HANDLE hSession);
CK_RV sbp11_object_prohibited(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject); /* copy, destroy, set */
CK_RV sbp11_get_object_size(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject, CK_ULONG_PTR pulSize);
CK_RV sbp11_get_attribute_value(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject, CK_ATTRIBUTE_PTR pTemplate,
                                CK_ULONG ulCount);
CK_RV sbp11_find_objects_init(CK_SESSION_HANDLE hSession, CK_ATTRIBUTE_PTR pTemplate, CK_ULONG ulCount);
CK_RV sbp11_find_objects(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE_PTR phObject, CK_ULONG ulMaxObjectCount,
                         CK_ULONG_PTR pulObjectCount);
CK_RV sbp11_find_objects_final(CK_SESSION_HANDLE hSession);
CK_RV sbp11_sign_init(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism, CK_OBJECT_HANDLE hKey);
CK_RV sbp11_sign(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pSignature,
                 CK_ULONG_PTR pulSignatureLen);
CK_RV sbp11_sign_update(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pPart, CK_ULONG ulPartLen);
CK_RV sbp11_sign_final(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pSignature, CK_ULONG_PTR pulSignatureLen);
CK_RV sbp11_digest_init(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism);
CK_RV sbp11_digest(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pDigest,
                   CK_ULONG_PTR pulDigestLen);
CK_RV sbp11_digest_update(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pPart, CK_ULONG ulPartLen);
CK_RV sbp11_digest_key(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hKey);
CK_RV sbp11_digest_final(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pDigest, CK_ULONG_PTR pulDigestLen);
CK_RV sbp11_generate_random(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pRandomData, CK_ULONG ulRandomLen);
CK_RV sbp11_seed_random(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pSeed, CK_ULONG ulSeedLen);
CK_RV sbp11_session_cancel(CK_SESSION_HANDLE hSession, CK_FLAGS flags);
/* Functions the module does not offer: CKR_CRYPTOKI_NOT_INITIALIZED before C_Initialize, else this code. */
CK_RV sbp11_unsupported(CK_RV rv);
/* The same for functions on a session: CKR_SESSION_HANDLE_INVALID comes first. */
CK_RV sbp11_unsupported_session(CK_SESSION_HANDLE hSession, CK_RV rv);

#endif
