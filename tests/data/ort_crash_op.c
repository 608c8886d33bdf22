/* An onnxruntime custom-op library whose one op, workbench.test::Crash, segfaults when it runs
 * (crash-containment tests: tests/test_ort_containment.py compiles it with the system's cc).
 *
 * No onnxruntime headers are needed: the few C-API declarations used are written out here.
 * OrtApi is an append-only table of function pointers (ABI-stable across releases); the slots
 * are CreateCustomOpDomain (26), CustomOpDomain_Add (27) and AddCustomOpDomain (28), and
 * OrtCustomOp version 1 holds the ten fields below (onnxruntime_c_api.h). */
#include <stddef.h>
#include <stdint.h>

typedef void *(*GetApiFn)(uint32_t version);
typedef struct { GetApiFn GetApi; const char *(*GetVersionString)(void); } OrtApiBase;
typedef void *(*CreateDomainFn)(const char *domain, void **out);
typedef void *(*DomainAddFn)(void *domain, const void *op);
typedef void *(*AddDomainFn)(void *options, void *domain);

typedef struct OrtCustomOp {
  uint32_t version;
  void *(*CreateKernel)(const struct OrtCustomOp *op, const void *api, const void *info);
  const char *(*GetName)(const struct OrtCustomOp *op);
  const char *(*GetExecutionProviderType)(const struct OrtCustomOp *op);
  int (*GetInputType)(const struct OrtCustomOp *op, size_t index);
  size_t (*GetInputTypeCount)(const struct OrtCustomOp *op);
  int (*GetOutputType)(const struct OrtCustomOp *op, size_t index);
  size_t (*GetOutputTypeCount)(const struct OrtCustomOp *op);
  void (*KernelCompute)(void *op_kernel, void *context);
  void (*KernelDestroy)(void *op_kernel);
  /* version 8+ (onnxruntime 1.32 calls these whatever the version says) */
  int (*GetInputCharacteristic)(const struct OrtCustomOp *op, size_t index);
  int (*GetOutputCharacteristic)(const struct OrtCustomOp *op, size_t index);
  int (*GetInputMemoryType)(const struct OrtCustomOp *op, size_t index);
  int (*GetVariadicInputMinArity)(const struct OrtCustomOp *op);
  int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp *op);
  int (*GetVariadicOutputMinArity)(const struct OrtCustomOp *op);
  int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp *op);
  void *reserved[64]; /* later versions' fields: zero (optional ones, checked for NULL) */
} OrtCustomOp;

static int kernel_state;
static void *create_kernel(const OrtCustomOp *op, const void *api, const void *info) {
  (void)op; (void)api; (void)info;
  return &kernel_state;
}
static const char *get_name(const OrtCustomOp *op) { (void)op; return "Crash"; }
static const char *get_ep(const OrtCustomOp *op) { (void)op; return NULL; }
static int get_type(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return 1; /* float */ }
static size_t get_count(const OrtCustomOp *op) { (void)op; return 1; }
static void compute(void *kernel, void *context) {
  (void)kernel; (void)context;
  volatile int *nowhere = (volatile int *)0;
  *nowhere = 1; /* the segmentation fault this library exists for */
}
static void destroy(void *kernel) { (void)kernel; }
static int zero_at(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return 0; /* required */ }
static int one(const OrtCustomOp *op) { (void)op; return 1; }

static OrtCustomOp crash_op = {1, create_kernel, get_name, get_ep, get_type, get_count,
                               get_type, get_count, compute, destroy, zero_at, zero_at,
                               zero_at, one, one, one, one, {0}};

void *RegisterCustomOps(void *options, const OrtApiBase *base) {
  void **api = (void **)base->GetApi(1);
  void *domain = NULL;
  void *status = ((CreateDomainFn)api[26])("workbench.test", &domain);
  if (status) return status;
  status = ((DomainAddFn)api[27])(domain, &crash_op);
  if (status) return status;
  return ((AddDomainFn)api[28])(options, domain);
}
