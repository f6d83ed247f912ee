package sqlobjects

import (
	"errors"
	"net/http"
)

// httpStatus is the status the manager's routes answer an apply's error
// with (instance's applyStatus, tested there): the tables of these tests
// say in which class each error falls by the status it gets.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrNotWritable):
		return http.StatusConflict
	case errors.Is(err, ErrPostgresDown):
		return http.StatusServiceUnavailable
	case IsRefusal(err):
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}
