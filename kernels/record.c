/* placeholder until written */
typedef int dli_placeholder_record;
