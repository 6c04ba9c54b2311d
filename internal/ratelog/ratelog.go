// Package ratelog logs repeated errors at a bounded rate, so that a fault
// that lasts (a denied verb, a throttling apiserver) is visible in the logs
// without flooding them.
package ratelog

import (
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Logger logs each key at most once per interval, with the number of
// occurrences left out since the last line.
type Logger struct {
	log      logr.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	last       time.Time
	suppressed int
}

// New returns a Logger writing to log.
func New(log logr.Logger, interval time.Duration, now func() time.Time) *Logger {
	return &Logger{log: log, interval: interval, now: now, keys: map[string]*entry{}}
}

// Error logs err under key unless key was logged less than interval ago.
func (l *Logger) Error(key string, err error, msg string, kv ...any) {
	if kv, ok := l.allow(key, kv); ok {
		l.log.Error(err, msg, kv...)
	}
}

// Info logs msg under key unless key was logged less than interval ago.
func (l *Logger) Info(key string, msg string, kv ...any) {
	if kv, ok := l.allow(key, kv); ok {
		l.log.Info(msg, kv...)
	}
}

// allow says whether key may be logged now, and adds the count of lines left
// out since the last one to kv.
func (l *Logger) allow(key string, kv []any) ([]any, bool) {
	l.mu.Lock()
	now := l.now()
	e, ok := l.keys[key]
	if !ok {
		e = &entry{}
		l.keys[key] = e
	}
	if ok && now.Sub(e.last) < l.interval {
		e.suppressed++
		l.mu.Unlock()
		return nil, false
	}
	suppressed := e.suppressed
	e.last, e.suppressed = now, 0
	l.mu.Unlock()
	if suppressed > 0 {
		kv = append(kv, "suppressedSinceLast", suppressed)
	}
	return kv, true
}
