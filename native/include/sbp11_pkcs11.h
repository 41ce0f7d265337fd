/* PKCS#11: p11-kit's header (version 2.40) plus the few version 3.0 definitions this module needs, written from
 * the OASIS PKCS#11 v3.0 base specification (section 5: CK_INTERFACE, CK_FUNCTION_LIST_3_0, the new functions),
 * CK_EDDSA_PARAMS, and the version 3.2 ML-DSA definitions. */
#ifndef SBP11_PKCS11_H
#define SBP11_PKCS11_H

#include <p11-kit/pkcs11.h>

#ifndef CKF_FIND_OBJECTS
#define CKF_FIND_OBJECTS 0x00000040UL /* C_SessionCancel */
#endif
#ifndef CKF_INTERFACE_FORK_SAFE
#define CKF_INTERFACE_FORK_SAFE 0x00000001UL
#endif

/* PKCS#11 3.2 ML-DSA (FIPS 204), from the OASIS PKCS#11 v3.2 specification ("ML-DSA"): key type, parameter sets,
 * the pure signature mechanism and its optional parameter. p11-kit's header predates them. */
#ifndef CKK_ML_DSA
#define CKK_ML_DSA 0x0000004AUL
#endif
#ifndef CKA_PARAMETER_SET
#define CKA_PARAMETER_SET 0x0000061DUL
#endif
#ifndef CKA_SEED
#define CKA_SEED 0x00000637UL
#endif
#ifndef CKP_ML_DSA_44
#define CKP_ML_DSA_44 0x00000001UL
#define CKP_ML_DSA_65 0x00000002UL
#define CKP_ML_DSA_87 0x00000003UL
#endif
#ifndef CKM_ML_DSA_KEY_PAIR_GEN
#define CKM_ML_DSA_KEY_PAIR_GEN 0x0000001CUL
#endif
#ifndef CKM_ML_DSA
#define CKM_ML_DSA 0x0000001DUL
#endif
#ifndef CKH_HEDGE_PREFERRED
#define CKH_HEDGE_PREFERRED 0x00000000UL
#define CKH_HEDGE_REQUIRED 0x00000001UL
#define CKH_DETERMINISTIC_REQUIRED 0x00000002UL
typedef CK_ULONG CK_HEDGE_TYPE;
typedef CK_ULONG CK_ML_DSA_PARAMETER_SET_TYPE;
typedef struct CK_SIGN_ADDITIONAL_CONTEXT {
  CK_HEDGE_TYPE hedgeVariant;
  CK_BYTE_PTR pContext;
  CK_ULONG ulContextLen;
} CK_SIGN_ADDITIONAL_CONTEXT;
#endif

/* PKCS#11 3.0 EdDSA (section 2.3.14 of the current mechanisms): CKM_EDDSA's optional parameter. Without it, or with
 * phFlag false and no context, CKM_EDDSA on an Ed25519 key is pure Ed25519; phFlag true is Ed25519ph. */
#ifndef CKD_NULL_EDDSA_PARAMS_DEFINED
#define CKD_NULL_EDDSA_PARAMS_DEFINED
typedef struct CK_EDDSA_PARAMS {
  CK_BBOOL phFlag;
  CK_ULONG ulContextDataLen;
  CK_BYTE_PTR pContextData;
} CK_EDDSA_PARAMS;
#endif

typedef struct CK_INTERFACE {
  CK_CHAR *pInterfaceName;
  CK_VOID_PTR pFunctionList;
  CK_FLAGS flags;
} CK_INTERFACE;
typedef CK_INTERFACE *CK_INTERFACE_PTR;
typedef CK_INTERFACE_PTR *CK_INTERFACE_PTR_PTR;

typedef CK_RV (*CK_C_GetInterfaceList)(CK_INTERFACE_PTR pInterfacesList, CK_ULONG_PTR pulCount);
typedef CK_RV (*CK_C_GetInterface)(CK_UTF8CHAR_PTR pInterfaceName, CK_VERSION_PTR pVersion,
                                   CK_INTERFACE_PTR_PTR ppInterface, CK_FLAGS flags);
typedef CK_RV (*CK_C_LoginUser)(CK_SESSION_HANDLE hSession, CK_USER_TYPE userType, CK_UTF8CHAR_PTR pPin,
                                CK_ULONG ulPinLen, CK_UTF8CHAR_PTR pUsername, CK_ULONG ulUsernameLen);
typedef CK_RV (*CK_C_SessionCancel)(CK_SESSION_HANDLE hSession, CK_FLAGS flags);
typedef CK_RV (*CK_C_MessageEncryptInit)(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism,
                                         CK_OBJECT_HANDLE hKey);
typedef CK_RV (*CK_C_EncryptMessage)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter, CK_ULONG ulParameterLen,
                                     CK_BYTE_PTR pAssociatedData, CK_ULONG ulAssociatedDataLen,
                                     CK_BYTE_PTR pPlaintext, CK_ULONG ulPlaintextLen, CK_BYTE_PTR pCiphertext,
                                     CK_ULONG_PTR pulCiphertextLen);
typedef CK_RV (*CK_C_EncryptMessageBegin)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                          CK_ULONG ulParameterLen, CK_BYTE_PTR pAssociatedData,
                                          CK_ULONG ulAssociatedDataLen);
typedef CK_RV (*CK_C_EncryptMessageNext)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                         CK_ULONG ulParameterLen, CK_BYTE_PTR pPlaintextPart,
                                         CK_ULONG ulPlaintextPartLen, CK_BYTE_PTR pCiphertextPart,
                                         CK_ULONG_PTR pulCiphertextPartLen, CK_FLAGS flags);
typedef CK_RV (*CK_C_MessageEncryptFinal)(CK_SESSION_HANDLE hSession);
typedef CK_RV (*CK_C_MessageDecryptInit)(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism,
                                         CK_OBJECT_HANDLE hKey);
typedef CK_RV (*CK_C_DecryptMessage)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter, CK_ULONG ulParameterLen,
                                     CK_BYTE_PTR pAssociatedData, CK_ULONG ulAssociatedDataLen,
                                     CK_BYTE_PTR pCiphertext, CK_ULONG ulCiphertextLen, CK_BYTE_PTR pPlaintext,
                                     CK_ULONG_PTR pulPlaintextLen);
typedef CK_RV (*CK_C_DecryptMessageBegin)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                          CK_ULONG ulParameterLen, CK_BYTE_PTR pAssociatedData,
                                          CK_ULONG ulAssociatedDataLen);
typedef CK_RV (*CK_C_DecryptMessageNext)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                         CK_ULONG ulParameterLen, CK_BYTE_PTR pCiphertextPart,
                                         CK_ULONG ulCiphertextPartLen, CK_BYTE_PTR pPlaintextPart,
                                         CK_ULONG_PTR pulPlaintextPartLen, CK_FLAGS flags);
typedef CK_RV (*CK_C_MessageDecryptFinal)(CK_SESSION_HANDLE hSession);
typedef CK_RV (*CK_C_MessageSignInit)(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism,
                                      CK_OBJECT_HANDLE hKey);
typedef CK_RV (*CK_C_SignMessage)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter, CK_ULONG ulParameterLen,
                                  CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pSignature,
                                  CK_ULONG_PTR pulSignatureLen);
typedef CK_RV (*CK_C_SignMessageBegin)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                       CK_ULONG ulParameterLen);
typedef CK_RV (*CK_C_SignMessageNext)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter, CK_ULONG ulParameterLen,
                                      CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pSignature,
                                      CK_ULONG_PTR pulSignatureLen);
typedef CK_RV (*CK_C_MessageSignFinal)(CK_SESSION_HANDLE hSession);
typedef CK_RV (*CK_C_MessageVerifyInit)(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism,
                                        CK_OBJECT_HANDLE hKey);
typedef CK_RV (*CK_C_VerifyMessage)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter, CK_ULONG ulParameterLen,
                                    CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pSignature,
                                    CK_ULONG ulSignatureLen);
typedef CK_RV (*CK_C_VerifyMessageBegin)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                         CK_ULONG ulParameterLen);
typedef CK_RV (*CK_C_VerifyMessageNext)(CK_SESSION_HANDLE hSession, CK_VOID_PTR pParameter,
                                        CK_ULONG ulParameterLen, CK_BYTE_PTR pData, CK_ULONG ulDataLen,
                                        CK_BYTE_PTR pSignature, CK_ULONG ulSignatureLen);
typedef CK_RV (*CK_C_MessageVerifyFinal)(CK_SESSION_HANDLE hSession);

/* The 2.40 list, in order, followed by the 3.0 functions. */
typedef struct CK_FUNCTION_LIST_3_0 {
  CK_VERSION version;
  CK_C_Initialize C_Initialize;
  CK_C_Finalize C_Finalize;
  CK_C_GetInfo C_GetInfo;
  CK_C_GetFunctionList C_GetFunctionList;
  CK_C_GetSlotList C_GetSlotList;
  CK_C_GetSlotInfo C_GetSlotInfo;
  CK_C_GetTokenInfo C_GetTokenInfo;
  CK_C_GetMechanismList C_GetMechanismList;
  CK_C_GetMechanismInfo C_GetMechanismInfo;
  CK_C_InitToken C_InitToken;
  CK_C_InitPIN C_InitPIN;
  CK_C_SetPIN C_SetPIN;
  CK_C_OpenSession C_OpenSession;
  CK_C_CloseSession C_CloseSession;
  CK_C_CloseAllSessions C_CloseAllSessions;
  CK_C_GetSessionInfo C_GetSessionInfo;
  CK_C_GetOperationState C_GetOperationState;
  CK_C_SetOperationState C_SetOperationState;
  CK_C_Login C_Login;
  CK_C_Logout C_Logout;
  CK_C_CreateObject C_CreateObject;
  CK_C_CopyObject C_CopyObject;
  CK_C_DestroyObject C_DestroyObject;
  CK_C_GetObjectSize C_GetObjectSize;
  CK_C_GetAttributeValue C_GetAttributeValue;
  CK_C_SetAttributeValue C_SetAttributeValue;
  CK_C_FindObjectsInit C_FindObjectsInit;
  CK_C_FindObjects C_FindObjects;
  CK_C_FindObjectsFinal C_FindObjectsFinal;
  CK_C_EncryptInit C_EncryptInit;
  CK_C_Encrypt C_Encrypt;
  CK_C_EncryptUpdate C_EncryptUpdate;
  CK_C_EncryptFinal C_EncryptFinal;
  CK_C_DecryptInit C_DecryptInit;
  CK_C_Decrypt C_Decrypt;
  CK_C_DecryptUpdate C_DecryptUpdate;
  CK_C_DecryptFinal C_DecryptFinal;
  CK_C_DigestInit C_DigestInit;
  CK_C_Digest C_Digest;
  CK_C_DigestUpdate C_DigestUpdate;
  CK_C_DigestKey C_DigestKey;
  CK_C_DigestFinal C_DigestFinal;
  CK_C_SignInit C_SignInit;
  CK_C_Sign C_Sign;
  CK_C_SignUpdate C_SignUpdate;
  CK_C_SignFinal C_SignFinal;
  CK_C_SignRecoverInit C_SignRecoverInit;
  CK_C_SignRecover C_SignRecover;
  CK_C_VerifyInit C_VerifyInit;
  CK_C_Verify C_Verify;
  CK_C_VerifyUpdate C_VerifyUpdate;
  CK_C_VerifyFinal C_VerifyFinal;
  CK_C_VerifyRecoverInit C_VerifyRecoverInit;
  CK_C_VerifyRecover C_VerifyRecover;
  CK_C_DigestEncryptUpdate C_DigestEncryptUpdate;
  CK_C_DecryptDigestUpdate C_DecryptDigestUpdate;
  CK_C_SignEncryptUpdate C_SignEncryptUpdate;
  CK_C_DecryptVerifyUpdate C_DecryptVerifyUpdate;
  CK_C_GenerateKey C_GenerateKey;
  CK_C_GenerateKeyPair C_GenerateKeyPair;
  CK_C_WrapKey C_WrapKey;
  CK_C_UnwrapKey C_UnwrapKey;
  CK_C_DeriveKey C_DeriveKey;
  CK_C_SeedRandom C_SeedRandom;
  CK_C_GenerateRandom C_GenerateRandom;
  CK_C_GetFunctionStatus C_GetFunctionStatus;
  CK_C_CancelFunction C_CancelFunction;
  CK_C_WaitForSlotEvent C_WaitForSlotEvent;
  CK_C_GetInterfaceList C_GetInterfaceList;
  CK_C_GetInterface C_GetInterface;
  CK_C_LoginUser C_LoginUser;
  CK_C_SessionCancel C_SessionCancel;
  CK_C_MessageEncryptInit C_MessageEncryptInit;
  CK_C_EncryptMessage C_EncryptMessage;
  CK_C_EncryptMessageBegin C_EncryptMessageBegin;
  CK_C_EncryptMessageNext C_EncryptMessageNext;
  CK_C_MessageEncryptFinal C_MessageEncryptFinal;
  CK_C_MessageDecryptInit C_MessageDecryptInit;
  CK_C_DecryptMessage C_DecryptMessage;
  CK_C_DecryptMessageBegin C_DecryptMessageBegin;
  CK_C_DecryptMessageNext C_DecryptMessageNext;
  CK_C_MessageDecryptFinal C_MessageDecryptFinal;
  CK_C_MessageSignInit C_MessageSignInit;
  CK_C_SignMessage C_SignMessage;
  CK_C_SignMessageBegin C_SignMessageBegin;
  CK_C_SignMessageNext C_SignMessageNext;
  CK_C_MessageSignFinal C_MessageSignFinal;
  CK_C_MessageVerifyInit C_MessageVerifyInit;
  CK_C_VerifyMessage C_VerifyMessage;
  CK_C_VerifyMessageBegin C_VerifyMessageBegin;
  CK_C_VerifyMessageNext C_VerifyMessageNext;
  CK_C_MessageVerifyFinal C_MessageVerifyFinal;
} CK_FUNCTION_LIST_3_0;
typedef CK_FUNCTION_LIST_3_0 *CK_FUNCTION_LIST_3_0_PTR;
typedef CK_FUNCTION_LIST_3_0_PTR *CK_FUNCTION_LIST_3_0_PTR_PTR;

CK_RV C_GetInterfaceList(CK_INTERFACE_PTR pInterfacesList, CK_ULONG_PTR pulCount);
CK_RV C_GetInterface(CK_UTF8CHAR_PTR pInterfaceName, CK_VERSION_PTR pVersion, CK_INTERFACE_PTR_PTR ppInterface,
                     CK_FLAGS flags);

#endif
