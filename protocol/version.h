/* version.h — the version every projd program reports (projd --version,
 * STATS "version", projctl and projload --version). One definition, so
 * that they cannot disagree; a build may still set it with -D. */
#ifndef PJ_VERSION_H
#define PJ_VERSION_H

#ifndef PJ_VERSION_STRING
#define PJ_VERSION_STRING "0.3.0"
#endif

#endif
