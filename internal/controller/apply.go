package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tuskv1alpha1 "tusk.dev/tusk/api/v1alpha1"
)

// applyOwned creates obj, owned by owner, or updates the existing object
// when what Tusk builds changed; an existing object owner does not
// control is refused (a spec error naming it), never taken over. The comparison is by a hash of the built
// object kept in an annotation, so a settled object costs no write and
// fields the API server or other controllers fill in are not fought over.
func (r *ClusterReconciler) applyOwned(ctx context.Context, owner client.Object, obj client.Object) error {
	return objectApplier{Client: r.Client, api: r.api}.applyOwned(ctx, owner, obj)
}

// objectApplier creates and updates the objects Tusk owns: the cluster's,
// and those of the objects beside it (a role's certificate Secret). api
// reads what the cache does not hold.
type objectApplier struct {
	client.Client
	api client.Reader
}

func (r objectApplier) applyOwned(ctx context.Context, owner client.Object, obj client.Object) error {
	if err := controllerutil.SetControllerReference(owner, obj, r.Scheme()); err != nil {
		return err
	}
	hash, err := hashOf(obj)
	if err != nil {
		return err
	}
	setAnnotation(obj, AnnotationHash, hash)
	existing, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is not a client.Object", obj)
	}
	created, err := r.getOrCreate(ctx, obj, existing)
	if created {
		return nil
	}
	kind := fmt.Sprintf("%T %s", obj, obj.GetName())
	switch {
	case err != nil:
		return err
	case keptFor(existing, owner):
		// Kept with the volumes by a deleted cluster of this name: taken
		// over, and the mark removed, by the update below.
	case !metav1.IsControlledBy(existing, owner):
		// Someone else's object of the name Tusk needs: taking it over
		// would let garbage collection delete it with the cluster.
		return userError(tuskv1alpha1.ReasonObjectNotOwned, "%s %s/%s exists and %s does not control it: Tusk does not take over objects it did not create; "+
			"rename or delete it (it was left untouched)", objectKind(existing), existing.GetNamespace(), existing.GetName(), owner.GetName())
	case existing.GetAnnotations()[AnnotationHash] == hash:
		return nil
	}
	obj.SetResourceVersion(existing.GetResourceVersion())
	if err := r.Update(ctx, obj); err != nil {
		return fmt.Errorf("while updating %s: %w", kind, err)
	}
	return nil
}

// getOrCreate reads obj's existing version into existing, or creates obj
// when there is none (created). The cache holds only what Tusk labelled:
// an object it does not hold may still exist (someone else's, or one just
// created that the cache has not seen yet), and is read from the API
// server when the create finds it.
func (r objectApplier) getOrCreate(ctx context.Context, obj, existing client.Object) (created bool, err error) {
	key := client.ObjectKeyFromObject(obj)
	kind := fmt.Sprintf("%T %s", obj, obj.GetName())
	err = r.Get(ctx, key, existing)
	if err == nil {
		return false, nil
	}
	if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("while reading %s: %w", kind, err)
	}
	err = r.Create(ctx, obj)
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("while creating %s: %w", kind, err)
	}
	if err := r.api.Get(ctx, key, existing); err != nil {
		return false, fmt.Errorf("while reading %s: %w", kind, err)
	}
	return false, nil
}

// hashOf is a short, stable hash of v's JSON form (maps are sorted).
func hashOf(v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}

func setAnnotation(obj client.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}

// deleteOwned deletes obj when it exists and owner controls it: an object
// of an earlier version's making that Tusk builds no more. An object of the
// same name that Tusk does not control is the user's, and stays.
func (r *ClusterReconciler) deleteOwned(ctx context.Context, owner client.Object, obj client.Object) error {
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("while reading %T %s: %w", obj, obj.GetName(), err)
	}
	if !metav1.IsControlledBy(obj, owner) {
		return nil
	}
	if err := r.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("while deleting %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// objectKind names an object's kind for users ("Secret"), from its Go type
// when its TypeMeta is empty, as objects read through the client are.
func objectKind(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	name := fmt.Sprintf("%T", obj) // *v1.Secret
	return name[strings.LastIndex(name, ".")+1:]
}
