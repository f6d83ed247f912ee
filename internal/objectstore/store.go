package objectstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// defaultMaxRetries keeps an unreachable endpoint from holding a caller
// for minutes (minio-go retries 10 times by default, backing off).
const defaultMaxRetries = 3

// Store is one bucket and path prefix on an S3-compatible server. Keys
// passed to its methods are relative to the prefix.
type Store struct {
	client   *minio.Client
	endpoint string
	bucket   string
	prefix   string // "" or "path/"
	partSize uint64
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	// Key is relative to the Store's prefix.
	Key          string
	Size         int64
	LastModified time.Time
	// Metadata is the user metadata, with lowercase keys. List leaves it
	// empty (S3's listings do not carry it): Stat the object for it.
	Metadata map[string]string
}

// New checks cfg and returns a Store. It sends no request: call Check to
// find out whether the bucket is reachable with the credentials.
func New(cfg Config) (*Store, error) {
	ep, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, errors.New("object store configuration names no bucket")
	}
	prefix, err := normalizePath(cfg.Path)
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		prefix += "/"
	}
	id, secret, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	tr, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, fmt.Errorf("object store part size %d is below S3's minimum of 5 MiB", cfg.PartSize)
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = defaultMaxRetries
	}
	client, err := minio.New(ep.host, &minio.Options{
		Creds:      credentials.NewStaticV4(id, secret, ""),
		Secure:     ep.secure,
		Transport:  tr,
		Region:     cfg.Region,
		MaxRetries: cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("while configuring the object store client for %s: %w", cfg.Endpoint, err)
	}
	return &Store{client: client, endpoint: cfg.Endpoint, bucket: cfg.Bucket, prefix: prefix, partSize: cfg.PartSize}, nil
}

// Location is where the Store's objects go, for messages and status:
// s3://bucket/prefix.
func (s *Store) Location() string {
	return "s3://" + s.bucket + "/" + s.prefix
}

// wrap turns a library error into an *Error that says what went wrong.
func (s *Store) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Key: key, Endpoint: s.endpoint, Bucket: s.bucket, Kind: Classify(err), Err: err}
}

func (s *Store) fullKey(key string) string { return s.prefix + key }

// Check lists one key of the bucket: it fails with KindNoSuchBucket,
// KindCredentials, KindUnreachable or KindTLS when the configuration cannot
// work, before anything else is tried.
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, MaxKeys: 1}) {
		return s.wrap("listing", "", obj.Err)
	}
	return nil
}

// Put stores what r yields under key, with the user metadata given,
// streaming it in parts of the configured size: the size need not be known.
// The object appears only once complete; a failed Put leaves no object.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, metadata map[string]string) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.fullKey(key), r, -1, minio.PutObjectOptions{
		UserMetadata: metadata,
		PartSize:     s.partSize,
		ContentType:  "application/octet-stream",
	})
	return s.wrap("writing", key, err)
}

// PutSized stores data under key with one PUT request, whatever its size
// (up to S3's 5 GiB), where Put's
// streamed upload of unknown size takes three (start, part, complete) and
// a buffer of the part size. Over HTTPS the payload is not hashed for the
// request's signature (TLS protects it, as for Put); over plain HTTP it is
// signed as it is sent.
func (s *Store) PutSized(ctx context.Context, key string, data []byte, metadata map[string]string) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.fullKey(key), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		UserMetadata:     metadata,
		ContentType:      "application/octet-stream",
		DisableMultipart: true, // S3 takes up to 5 GiB in one PUT
	})
	return s.wrap("writing", key, err)
}

// PutStream writes a large stream of unknown size to key, like Put, but
// uploads a part while it reads the next, so that reading never waits for
// an upload unless two parts are in flight: it holds two parts of memory.
// sizeHint, when positive, is an upper estimate of the stream's size: the
// parts are then as small as fits it (see streamPartSize), so that the
// last part, which is sent only once the stream ends, is small too.
func (s *Store) PutStream(ctx context.Context, key string, r io.Reader, metadata map[string]string, sizeHint int64) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.fullKey(key), r, -1, minio.PutObjectOptions{
		UserMetadata:          metadata,
		PartSize:              streamPartSize(s.partSize, sizeHint),
		ContentType:           "application/octet-stream",
		ConcurrentStreamParts: true,
		NumThreads:            2,
	})
	return s.wrap("writing", key, err)
}

// streamPartSize is the part size for a stream of about sizeHint bytes
// (0: unknown): the smallest whole number of MiB, at least S3's 5 MiB, that
// fits it in 9,000 parts (S3 allows 10,000: a margin for the estimate), and
// never more than the configured size, which bounds the memory.
func streamPartSize(configured uint64, sizeHint int64) uint64 {
	if sizeHint <= 0 {
		return configured
	}
	const mib, parts = 1 << 20, 9000
	perPart := (uint64(sizeHint) + parts - 1) / parts
	need := (perPart + mib - 1) / mib * mib
	return min(configured, max(minPartSize, need))
}

// Get opens key for reading, streaming it from the server. The caller
// closes the reader. A missing object is an error for which IsNotFound
// holds; a missing bucket is KindNoSuchBucket, never that.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	// One GET (not the HEAD minio.Client.GetObject starts with): its
	// reply's error body tells a missing object from a missing bucket.
	body, info, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, s.fullKey(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, ObjectInfo{}, s.wrap("reading", key, err)
	}
	return body, s.info(info), nil
}

// Stat returns the object's size and metadata. A HEAD reply has no body, so
// a missing bucket may show as a missing object here: Check or Get tell
// them apart.
func (s *Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	info, err := s.client.StatObject(ctx, s.bucket, s.fullKey(key), minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s.wrap("reading the metadata of", key, err)
	}
	return s.info(info), nil
}

// Exists says whether key exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.Stat(ctx, key)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// List yields the objects whose keys start with prefix (relative to the
// Store's), in key order, recursively, and stops at the first error.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		opts := minio.ListObjectsOptions{Prefix: s.fullKey(prefix), Recursive: true}
		for obj := range s.client.ListObjects(ctx, s.bucket, opts) {
			if obj.Err != nil {
				yield(ObjectInfo{}, s.wrap("listing", prefix, obj.Err))
				return
			}
			if !yield(s.info(obj), nil) {
				return
			}
		}
	}
}

// Delete removes key. Deleting a missing object succeeds, as in S3.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.wrap("deleting", key, s.client.RemoveObject(ctx, s.bucket, s.fullKey(key), minio.RemoveObjectOptions{}))
}

func (s *Store) info(o minio.ObjectInfo) ObjectInfo {
	md := make(map[string]string, len(o.UserMetadata))
	for k, v := range o.UserMetadata {
		md[strings.ToLower(strings.TrimPrefix(http.CanonicalHeaderKey(k), "X-Amz-Meta-"))] = v
	}
	return ObjectInfo{
		Key:          strings.TrimPrefix(o.Key, s.prefix),
		Size:         o.Size,
		LastModified: o.LastModified,
		Metadata:     md,
	}
}

// JoinKey joins key parts with slashes, as object keys are written.
func JoinKey(parts ...string) string { return path.Join(parts...) }
