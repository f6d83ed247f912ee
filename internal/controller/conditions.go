package controller

import (
	"errors"
	"fmt"
)

// specError is a problem only the user can fix (a missing Secret, an
// unsupported bootstrap method): reported in conditions and Events, not
// retried fast.
type specError struct {
	reason, message string
}

func (e *specError) Error() string { return e.message }

func userError(reason, format string, args ...any) error {
	return &specError{reason: reason, message: fmt.Sprintf(format, args...)}
}

func asSpecError(err error) (*specError, bool) {
	var se *specError
	ok := errors.As(err, &se)
	return se, ok
}
