/* What the bundled loggers share: how a run treats the logs an earlier run left in the same log dir
 * (overwrite them, or keep them and add a timestamp to this run's names), decided by the logger's own
 * params, then DLINSPECT_* and then nvdlfw_inspect's environment variables (docs/logging.md); and
 * the check that refuses a directory they could never write. */
#ifndef DLI_LOGGERS_LOG_ENV_H
#define DLI_LOGGERS_LOG_ENV_H

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlinspect/plugin.h>

/* The params each logger declares for these (their descriptors' entries). */
#define DLI_LOG_ENV_OVERWRITE_DOC                                                                  \
	"truncate this logger's files (tensorboard: remove the event files of other runs) at start, "  \
	"as nvdlfw_inspect does; unset: $DLINSPECT_LOG_OVERWRITE, then "                          \
	"$NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE, then true"
#define DLI_LOG_ENV_TIMESTAMP_DOC                                                                  \
	"put the run's start time (YYYYmmdd_HHMMSS) in the file names (tensorboard: a run directory), " \
	"so runs never share a file; unset: $DLINSPECT_LOG_TIMESTAMP, then "                         \
	"$NVDLFW_INSPECT_ENABLE_LOG_TIMESTAMP, then false"

struct dli_log_env {
	bool overwrite;
	bool timestamp;
	char stamp[64]; /* the run's timestamp when `timestamp` is set, else "" */
};

/* Reads a switch as nvdlfw_inspect does (an integer, 0 = off) and also true/false, yes/no, on/off.
 * Returns 1 with *out set, 0 when `name` is unset or empty, -EINVAL (err filled) otherwise. */
static inline int dli_log_env_switch(const char *name, bool *out, struct dli_error *err)
{
	static const char *const on[] = {"true", "yes", "on"}, *const off[] = {"false", "no", "off"};
	const char *s = getenv(name);
	char *end;

	if (!s || !*s)
		return 0;
	errno = 0;
	long v = strtol(s, &end, 10);
	while (end != s && isspace((unsigned char)*end))
		end++;
	if (end != s && !*end && !errno) {
		*out = v != 0;
		return 1;
	}
	for (int i = 0; i < 3; i++) {
		if (!strcasecmp(s, on[i]) || !strcasecmp(s, off[i])) {
			*out = !strcasecmp(s, on[i]);
			return 1;
		}
	}
	snprintf(err->message, sizeof(err->message),
		 "%s='%s': expected 0 or 1 (or true/false, yes/no, on/off)", name, s);
	return -EINVAL;
}

/* One setting: the logger's param when the config sets it, else $dli_name, else $nv_name, else
 * `def`. 0 or -EINVAL (err filled). */
static inline int dli_log_env_setting(const struct dli_value *param, const char *dli_name,
				      const char *nv_name, bool def, bool *out, struct dli_error *err)
{
	int rc;

	if (param && param->set) {
		*out = param->u.b;
		return 0;
	}
	*out = def;
	rc = dli_log_env_switch(dli_name, out, err);
	if (rc == 0)
		rc = dli_log_env_switch(nv_name, out, err);
	return rc < 0 ? rc : 0;
}

/* The run's timestamp. nvdlfw_inspect keeps it in $NVDLFW_INSPECT_LOG_TIMESTAMP, set by the first
 * logger that needs it, so every log of one process (and processes started with it set) shares one;
 * the same here. A value given there becomes part of file names: it may not hold a path. */
static inline int dli_log_env_stamp(char *stamp, size_t size, struct dli_error *err)
{
	const char *s = getenv("NVDLFW_INSPECT_LOG_TIMESTAMP");

	if (!s || !*s) {
		time_t now = time(NULL);
		struct tm tm;
		if (!localtime_r(&now, &tm) || !strftime(stamp, size, "%Y%m%d_%H%M%S", &tm))
			return -EINVAL;
		/* Not overwriting: another thread's logger may have set it meanwhile. */
		setenv("NVDLFW_INSPECT_LOG_TIMESTAMP", stamp, 0);
		s = getenv("NVDLFW_INSPECT_LOG_TIMESTAMP");
		if (!s)
			return 0;
	}
	bool ok = s[0] != '.' && strlen(s) < size;
	for (const char *c = s; ok && *c; c++)
		ok = isalnum((unsigned char)*c) || *c == '_' || *c == '-' || *c == '.';
	if (!ok) {
		snprintf(err->message, sizeof(err->message),
			 "NVDLFW_INSPECT_LOG_TIMESTAMP='%s': a timestamp becomes part of file names: "
			 "letters, digits, '_', '-' and '.' only (not first), at most %zu characters",
			 s, size - 1);
		return -EINVAL;
	}
	snprintf(stamp, size, "%s", s);
	return 0;
}

/* Fills `env` from a logger's `overwrite` and `timestamp` params (either may be NULL: not set). */
static inline int dli_log_env_get(const struct dli_value *overwrite, const struct dli_value *timestamp,
				  struct dli_log_env *env, struct dli_error *err)
{
	int rc;

	memset(env, 0, sizeof(*env));
	rc = dli_log_env_setting(overwrite, "DLINSPECT_LOG_OVERWRITE",
				 "NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE", true, &env->overwrite, err);
	if (rc == 0)
		rc = dli_log_env_setting(timestamp, "DLINSPECT_LOG_TIMESTAMP",
					 "NVDLFW_INSPECT_ENABLE_LOG_TIMESTAMP", false,
					 &env->timestamp, err);
	if (rc == 0 && env->timestamp)
		rc = dli_log_env_stamp(env->stamp, sizeof(env->stamp), err);
	return rc;
}

/* A logger's directory is created on the first line or event written, but one that can never be
 * created or written is refused at create (dli_init), rather than at the first statistic hours
 * later: its nearest existing ancestor must be a directory this process may create entries in.
 * `what` names it in the message ("log dir"). */
static inline int dli_log_check_dir(const char *what, const char *log_dir, struct dli_error *err)
{
	char *path = strdup(log_dir);
	struct stat st;
	int rc = 0;

	if (!path)
		return -ENOMEM;
	for (;;) {
		if (stat(path, &st) == 0)
			break;
		char *slash = strrchr(path, '/');
		if ((errno != ENOENT && errno != ENOTDIR) || !slash) {
			if (errno == ENOENT) /* a relative first component: its parent is "." */
				strcpy(path, ".");
			else {
				rc = -errno;
				snprintf(err->message, sizeof(err->message),
					 "%s '%s': cannot look at '%s': %s", what, log_dir, path,
					 strerror(errno));
				goto out;
			}
			continue;
		}
		if (slash == path)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	if (!S_ISDIR(st.st_mode)) {
		rc = -ENOTDIR;
		snprintf(err->message, sizeof(err->message),
			 "%s '%s': '%s' is not a directory", what, log_dir, path);
	} else if (access(path, W_OK | X_OK) != 0) {
		rc = -errno;
		snprintf(err->message, sizeof(err->message),
			 "%s '%s': cannot create files in '%s': %s", what, log_dir, path,
			 strerror(errno));
	}
out:
	free(path);
	return rc;
}

#endif
